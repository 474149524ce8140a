"""W17: the pure UI modules, imported into the real browser from the router (no Node needed)."""

from __future__ import annotations

from typing import Any

from tests.ui.conftest import GuardedPage


def run(ui: GuardedPage, module: str, body: str) -> Any:
    """`body` is an async function body given `m`, the module served at /router/ui/<module>."""
    return ui.page.evaluate(
        f"async () => {{ const m = await import('/router/ui/{module}'); {body} }}"
    )


def test_numeric_aware_sort_and_empty_values_last(ui: GuardedPage) -> None:
    ui.goto("/router/ui/nodes")
    got = run(
        ui,
        "lib/ui.js",
        "return m.sortRows([{k:'q10'},{k:'q4'},{k:''},{k:'Q2'},{k:'q4b'}], 'k').map((r) => r.k);",
    )
    assert got == ["Q2", "q4", "q4b", "q10", ""]
    desc = run(
        ui,
        "lib/ui.js",
        "return m.sortRows([{k: 2}, {k: 10}, {k: 1}], 'k', 'desc').map((r) => r.k);",
    )
    assert desc == [10, 2, 1]


def test_models_view_filters_and_reducer(ui: GuardedPage) -> None:
    ui.goto("/router/ui/nodes")
    body = """
      const rows = [
        {id: 'chat-q10', capabilities: ['text'], backend_mode: 'kobold', status: 'ready'},
        {id: 'chat-q4', capabilities: ['text', 'image'], backend_mode: 'llama_sdcpp', status: 'unloaded'},
        {id: 'img', image_id: 'sdxl', capabilities: ['image'], backend_mode: 'llama_sdcpp', disabled: true},
      ];
      const ids = (p) => m.visibleRows(rows, p).map((r) => r.id);
      const map = new Map(rows.map((r) => [r.id, r]));
      const after = m.reduce(map, {event: 'loading', model: 'chat-q4'});
      return {
        all: ids({}), q: ids({q: 'SDX'}), lane: ids({lane: 'image'}), state: ids({state: 'disabled'}),
        family: ids({family: 'kobold'}), desc: ids({sort: 'id', dir: 'desc'}),
        loading: after.get('chat-q4').status, untouched: map.get('chat-q4').status,
        catalog: m.reduce(map, {event: 'catalog'}) !== map && typeof m.reduce(map, {event: 'catalog'}),
        unknown: m.reduce(map, {event: 'ready', model: 'nope'}) === map,
      };
    """
    got = run(ui, "pages/models.js", body)
    assert got == {
        "all": ["chat-q4", "chat-q10", "img"],
        "q": ["img"],
        "lane": ["chat-q4", "img"],
        "state": ["img"],
        "family": ["chat-q10"],
        "desc": ["img", "chat-q10", "chat-q4"],
        "loading": "loading",
        "untouched": "unloaded",
        "catalog": "symbol",
        "unknown": True,
    }


def test_overview_reducer_and_usual_load_time(ui: GuardedPage) -> None:
    ui.goto("/router/ui/nodes")
    body = """
      let s = m.fromStatus({runtimes: [{runtime: 'a@text', model: 'a', lanes: ['text'], state: 'ready'}], queued: {text: 2}});
      s = m.reduce(s, {event: 'loading', runtime: 'b@image', model: 'b', lanes: ['image'], time: 5});
      const loading = s.runtimes.get('b@image').state;
      s = m.reduce(s, {event: 'unloaded', runtime: 'a@text'});
      return {
        loading, keys: [...s.runtimes.keys()], queued: s.queued.text,
        ready: typeof m.reduce(s, {event: 'ready', runtime: 'b@image'}),
        usual: m.usualLoadSeconds([{model: 'a', status: 'ok', duration_ms: 3000},
          {model: 'a', status: 'ok', duration_ms: 1000}, {model: 'a', status: 'ok', duration_ms: 2000},
          {model: 'a', status: 'failed', duration_ms: 9000}]),
      };
    """
    got = run(ui, "pages/overview.js", body)
    assert got == {
        "loading": "loading",
        "keys": ["b@image"],
        "queued": 2,
        "ready": "symbol",
        "usual": {"a": 2},
    }


def test_line_diff_and_option_parsing(ui: GuardedPage) -> None:
    ui.goto("/router/ui/nodes")
    diff = run(
        ui, "lib/diff.js", "return m.lineDiff('a\\nb\\nc', 'a\\nc\\nd').map((d) => d.op + d.line);"
    )
    assert diff == ["samea", "delb", "samec", "addd"]
    parsed = run(
        ui,
        "pages/config.js",
        "return [m.parseOptions('{\"a\": 1}'), String(m.parseOptions('[1]')), String(m.parseOptions('{'))];",
    )
    assert parsed[0] == {"a": 1}
    assert "one JSON object" in parsed[1] and "not JSON" in parsed[2]


def test_sse_backoff_and_api_urls(ui: GuardedPage) -> None:
    ui.goto("/router/ui/nodes")
    delays = run(ui, "lib/sse.js", "return [0, 1, 2, 3, 4, 9].map(m.backoffDelay);")
    assert delays == [1000, 2000, 4000, 5000, 5000, 5000]
    body = """
      const bad = [];
      for (const p of ['/router/v1/status', 'status', '//evil/x']) {
        try { m.apiUrl(p); } catch (e) { bad.push(p); }
      }
      return {url: m.apiUrl('/site/x', {a: 'b c', skip: '', many: [1, 2]}), bad};
    """
    got = run(ui, "lib/api.js", body)
    assert got == {
        "url": "/router/v1/site/x?a=b+c&many=1&many=2",
        "bad": ["/router/v1/status", "status", "//evil/x"],
    }


def test_h_sets_text_never_markup(ui: GuardedPage) -> None:
    ui.goto("/router/ui/nodes")
    body = """
      const el = m.h('div', {title: '<b>', onclick: () => {}}, '<img src=x onerror=alert(1)>', 3, null, ['a']);
      return {html: el.innerHTML, imgs: el.querySelectorAll('img').length, title: el.title};
    """
    got = run(ui, "lib/dom.js", body)
    assert got == {"html": "&lt;img src=x onerror=alert(1)&gt;3a", "imgs": 0, "title": "<b>"}
