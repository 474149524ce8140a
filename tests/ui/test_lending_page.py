"""The Lending page on a master with a slave: links made in the browser and read back from
the route, an ineligible candidate shown disabled with its reason, a refused save shown next
to the form with the form kept, Remove all; guardians set and cleared at two scopes."""

from __future__ import annotations

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Route, expect

from tests.ui.conftest import GuardedPage
from tests.ui.lending_cluster import GUARDIANS, TEXT_LINKS, LendingCluster

SUMMARY_REFRESH_S = 3  # router/ui/lib/lending-live.js SUMMARY_REFRESH_MS


def held(lending: LendingCluster) -> list[tuple[str, str, bool, bool]]:
    links = lending.get(TEXT_LINKS, node_id="m", model_id="slow")["links"]
    return [
        (
            x["owner"]["model_id"],
            x["helper"]["model_id"],
            x["load_if_unloaded"],
            x["restore_after_borrow"],
        )
        for x in links
    ]


def candidate_row(lending_ui: GuardedPage, model: str, node: str = "s1"):  # type: ignore[no-untyped-def]
    return lending_ui.page.locator(
        f'form[aria-label="Edit links"] tbody tr[data-key="{node}/{model}"]'
    )


def test_links_are_made_in_the_browser_and_stored(
    lending_ui: GuardedPage, lending: LendingCluster
) -> None:
    lending_ui.goto("/router/ui/lending")
    expect(lending_ui.page.locator("main h1")).to_have_text("Lending")
    expect(lending_ui.page.locator("main")).to_contain_text("No model picked")
    lending_ui.page.get_by_label("Anchor model").select_option("m/slow")
    held_table = lending_ui.page.locator("main table", has_text="Links the router holds")
    expect(held_table).to_contain_text("No links yet")
    assert "model=slow" in lending_ui.page.url and "node=m" in lending_ui.page.url
    fast = candidate_row(lending_ui, "fast")
    expect(fast).to_contain_text("eligible")
    expect(fast).to_contain_text("different weights")
    fast.get_by_label("Lends work to fast", exact=True).check()
    fast.get_by_label("reload displaced model (lends work to fast)").check()
    fast.get_by_label("load if not loaded (lends work to fast)").uncheck()
    lending_ui.page.get_by_role("button", name="Save links").click()
    dialog = lending_ui.page.get_by_role("dialog", name="Link models with different weights?")
    expect(dialog).to_contain_text("fast on s1")
    dialog.get_by_role("button", name="Save anyway").click()
    expect(lending_ui.page.locator("main [role=status]").first).to_contain_text(
        "Saved: 1 link(s) for slow"
    )
    # The table now shows what the router holds, read again after the save.
    expect(held_table.locator("tbody tr")).to_have_count(1)
    expect(held_table.locator("tbody tr")).to_contain_text("m/slow")
    expect(held_table.locator("tbody tr")).to_contain_text("s1/fast")
    assert held(lending) == [("slow", "fast", False, True)]
    # The form was drawn again: the keyboard is back on Save, not at the top of the page.
    expect(lending_ui.page.get_by_role("button", name="Save links")).to_be_focused()
    # A reload shows the stored link ticked with its flags.
    lending_ui.page.reload()
    fast = candidate_row(lending_ui, "fast")
    expect(fast.get_by_label("Lends work to fast", exact=True)).to_be_checked()
    expect(fast.get_by_label("load if not loaded (lends work to fast)")).not_to_be_checked()
    expect(fast.get_by_label("reload displaced model (lends work to fast)")).to_be_checked()
    # The other end sees it as "borrows work from".
    lending_ui.goto("/router/ui/lending?section=links&lane=text&node=s1&model=fast")
    expect(
        candidate_row(lending_ui, "slow", "m").get_by_label("Borrows work from slow", exact=True)
    ).to_be_checked()


def test_a_model_detail_opens_its_links(lending_ui: GuardedPage) -> None:
    lending_ui.goto("/router/ui/models?model=pic")
    lending_ui.page.get_by_role("link", name="Lending links of pic").click()
    expect(lending_ui.page.locator("main h1")).to_have_text("Lending")
    expect(lending_ui.page.get_by_label("Anchor model")).to_have_value("m/pic")
    expect(
        lending_ui.page.get_by_role("group", name="Lane").get_by_role("button", name="Image")
    ).to_have_attribute("aria-pressed", "true")
    expect(candidate_row(lending_ui, "pic2")).to_contain_text("eligible")


def test_an_ineligible_candidate_is_disabled_with_its_reason(lending_ui: GuardedPage) -> None:
    lending_ui.goto("/router/ui/lending?section=links&lane=text&node=m&model=slow")
    tiny = candidate_row(lending_ui, "tiny")
    expect(tiny).to_contain_text("not eligible")
    expect(tiny).to_contain_text("context window too small")
    expect(tiny.get_by_label("Lends work to tiny", exact=True)).to_be_disabled()
    expect(tiny.get_by_label("Borrows work from tiny", exact=True)).to_be_disabled()
    same_node = candidate_row(lending_ui, "other", "m")
    expect(same_node).to_contain_text("on the same node")
    expect(same_node.get_by_label("Lends work to other", exact=True)).to_be_disabled()
    expect(
        candidate_row(lending_ui, "fast").get_by_label("Lends work to fast", exact=True)
    ).to_be_enabled()


def test_a_refused_save_is_shown_and_the_form_is_kept(
    lending_ui: GuardedPage, lending: LendingCluster
) -> None:
    lending_ui.allow(r"/router/v1/site/text-routing-groups$", 400)
    lending_ui.goto("/router/ui/lending?section=links&lane=text&node=m&model=slow")
    fast, tiny = candidate_row(lending_ui, "fast"), candidate_row(lending_ui, "tiny")
    fast.get_by_label("Lends work to fast", exact=True).check()
    # A form the router disagrees with (its view of tiny changed since the page was drawn):
    # the tick is enabled by hand, as a stale page would have it.
    tiny.get_by_label("Lends work to tiny", exact=True).evaluate("(el) => { el.disabled = false; }")
    tiny.get_by_label("Lends work to tiny", exact=True).check()
    lending_ui.page.get_by_role("button", name="Save links").click()
    lending_ui.page.get_by_role("dialog").get_by_role("button", name="Save anyway").click()
    error = lending_ui.page.locator("#links-error [role=alert]")
    expect(error).to_contain_text("cannot lend to")
    expect(error).to_contain_text("context_too_small")
    expect(fast.get_by_label("Lends work to fast", exact=True)).to_be_checked()  # nothing lost
    expect(tiny.get_by_label("Lends work to tiny", exact=True)).to_be_checked()
    assert held(lending) == []
    # Unticking the refused one and saving again works from the same form.
    tiny.get_by_label("Lends work to tiny", exact=True).uncheck()
    lending_ui.page.get_by_role("button", name="Save links").click()
    lending_ui.page.get_by_role("dialog").get_by_role("button", name="Save anyway").click()
    expect(
        lending_ui.page.locator("main table", has_text="Links the router holds").locator("tbody tr")
    ).to_contain_text("s1/fast")
    expect(error).to_have_count(0)
    assert held(lending) == [("slow", "fast", True, False)]


def test_remove_all_links(lending_ui: GuardedPage, lending: LendingCluster) -> None:
    body = {
        "anchor": {"node_id": "m", "model_id": "slow"},
        "lends_to": [{"node_id": "s1", "model_id": "fast"}],
    }
    assert lending.http.post(TEXT_LINKS, json=body).status_code == 200
    lending_ui.goto("/router/ui/lending?section=links&lane=text&node=m&model=slow")
    held_table = lending_ui.page.locator("main table", has_text="Links the router holds")
    expect(held_table.locator("tbody tr")).to_contain_text("s1/fast")
    lending_ui.page.get_by_role("button", name="Remove all links").click()
    dialog = lending_ui.page.get_by_role("dialog", name="Remove every text link of slow?")
    dialog.get_by_role("button", name="Remove all").click()
    expect(lending_ui.page.locator("main [role=status]").first).to_contain_text(
        "Removed 1 link(s) of slow"
    )
    expect(held_table).to_contain_text("No links yet")
    expect(lending_ui.page.get_by_role("button", name="Remove all links")).to_be_disabled()
    expect(lending_ui.page.locator("main [role=status]").first).to_be_focused()
    assert held(lending) == []


def test_the_image_lane_has_its_own_links(lending_ui: GuardedPage, lending: LendingCluster) -> None:
    lending_ui.goto("/router/ui/lending?section=links")
    lending_ui.page.get_by_role("group", name="Lane").get_by_role("button", name="Image").click()
    picker = lending_ui.page.get_by_label("Anchor model")
    expect(picker.locator("option")).to_have_text(["Pick a model…", "pic on m", "pic2 on s1"])
    picker.select_option("m/pic")
    pic2 = candidate_row(lending_ui, "pic2")
    pic2.get_by_label("Lends work to pic2", exact=True).check()
    lending_ui.page.get_by_role("button", name="Save links").click()
    lending_ui.page.get_by_role("dialog").get_by_role("button", name="Save anyway").click()
    expect(
        lending_ui.page.locator("main table", has_text="Links the router holds").locator("tbody tr")
    ).to_contain_text("s1/pic2")
    image = lending.get("/router/v1/site/routing-groups", node_id="m", model_id="pic")["links"]
    assert [x["helper"] for x in image] == [{"node_id": "s1", "model_id": "pic2"}]


def assignments(lending: LendingCluster) -> list[tuple[str, str, str, str]]:
    return sorted(
        (a["scope"], a["node_id"], a["model_id"], a["guardian"]["model_id"])
        for a in lending.get(GUARDIANS)["assignments"]
    )


def test_guardians_set_and_cleared_at_two_scopes(
    lending_ui: GuardedPage, lending: LendingCluster
) -> None:
    lending_ui.goto("/router/ui/lending?section=guardians")
    expect(lending_ui.page.locator("main h2").first).to_have_text("Guardian models")
    listing = lending_ui.page.locator("main table", has_text="Guardian assignments")
    expect(listing).to_contain_text("No guardian assigned")
    form = lending_ui.page.get_by_role("form", name="Assign a guardian")
    # A model scope: slow on m, answered by eye2 on the slave.
    form.get_by_label("Scope").select_option("model")
    form.get_by_label("Model", exact=True).select_option("m/slow")
    form.get_by_label("Guardian").select_option("s1/eye2")
    form.get_by_role("button", name="Assign").click()
    expect(listing.locator("tbody tr")).to_have_count(1)
    expect(listing).to_contain_text("slow on m")
    # The cluster scope: eye on the master.
    form = lending_ui.page.get_by_role("form", name="Assign a guardian")
    form.get_by_label("Scope").select_option("cluster")
    expect(form.get_by_label("Model", exact=True)).to_be_hidden()
    form.get_by_label("Guardian").select_option("m/eye")
    form.get_by_role("button", name="Assign").click()
    expect(listing.locator("tbody tr")).to_have_count(2)
    assert assignments(lending) == [("cluster", "", "", "eye"), ("model", "m", "slow", "eye2")]
    # Clear the model one; the cluster one stays.
    listing.get_by_role("button", name="Clear the model guardian for slow on m").click()
    lending_ui.page.get_by_role("dialog").get_by_role("button", name="Clear").click()
    expect(listing.locator("tbody tr")).to_have_count(1)
    expect(listing).to_contain_text("every text-only model of the cluster")
    assert assignments(lending) == [("cluster", "", "", "eye")]
    listing.get_by_role("button", name="Clear the cluster guardian").click()
    lending_ui.page.get_by_role("dialog").get_by_role("button", name="Clear").click()
    expect(listing).to_contain_text("No guardian assigned")
    assert assignments(lending) == []


def test_guardian_errors_are_shown(lending_ui: GuardedPage, lending: LendingCluster) -> None:
    lending_ui.allow(r"/router/v1/site/guardian-models$", 404)
    lending_ui.allow(r"/router/v1/site/guardian-models$", 400)
    body = {"scope": "node", "node_id": "s1", "guardian": {"model_id": "eye"}}
    assert lending.http.post(GUARDIANS, json=body).status_code == 200
    lending_ui.goto("/router/ui/lending?section=guardians")
    listing = lending_ui.page.locator("main table", has_text="Guardian assignments")
    expect(listing).to_contain_text("every text-only model on s1")
    # Cleared elsewhere meanwhile: this page's Clear gets the router's 404.
    lending.http.delete(GUARDIANS, params={"scope": "node", "node_id": "s1"})
    listing.get_by_role(
        "button", name="Clear the node guardian for every text-only model on s1"
    ).click()
    lending_ui.page.get_by_role("dialog").get_by_role("button", name="Clear").click()
    expect(lending_ui.page.locator("#guardian-clear-error [role=alert]")).to_contain_text(
        "no node-scope guardian assignment matches"
    )
    # A guardian that is not multimodal (a picker the router disagrees with): its 400.
    form = lending_ui.page.get_by_role("form", name="Assign a guardian")
    form.get_by_label("Scope").select_option("cluster")
    form.get_by_label("Guardian").evaluate("(el) => { el.options[0].value = 'm/other'; }")
    form.get_by_role("button", name="Assign").click()
    expect(lending_ui.page.locator("#guardian-error [role=alert]")).to_contain_text(
        "is not a multimodal model"
    )
    assert assignments(lending) == []


def test_sections_without_their_route_say_so(lending_ui: GuardedPage) -> None:
    # A router without the scheduler's routes answers 404 for them (as every router did before
    # they were built): imitated here, since this one may have them.
    def missing(route: Route) -> None:
        body = {"error": {"message": "not found", "type": "not_found_error", "code": "not_found"}}
        route.fulfill(status=404, json=body)

    for name in ("summary", "decisions", "settings"):
        lending_ui.allow(rf"/router/v1/site/offload/{name}$", 404)
        lending_ui.page.route(f"**/router/v1/site/offload/{name}*", missing)
    sections = {
        "leases": "The live lease summary is not available on this router",
        "decisions": "The decision log is not available on this router",
        "settings": "Lending settings are not available on this router",
    }
    for section, text in sections.items():
        lending_ui.goto(f"/router/ui/lending?section={section}")
        expect(lending_ui.page.locator("main .unavailable")).to_contain_text(text)
        expect(lending_ui.page.get_by_role("alert")).to_have_count(0)
    # The summary is not asked again once the router said it has none.
    lending_ui.goto("/router/ui/lending?section=leases")
    expect(lending_ui.page.locator("main .unavailable")).to_be_visible()
    asked = len(lending_ui.calls("/router/v1/site/offload/summary"))
    lending_ui.page.wait_for_timeout(SUMMARY_REFRESH_S * 1000 + 1500)
    assert len(lending_ui.calls("/router/v1/site/offload/summary")) == asked


AXE = Axe()


def check_sections(lending_ui: GuardedPage, theme: str, paths: tuple[str, ...]) -> None:
    """axe finds nothing serious, and nothing scrolls sideways at 1280 and 390 px."""
    lending_ui.page.emulate_media(color_scheme=theme)
    for path in paths:
        for width in (1280, 390):
            lending_ui.page.set_viewport_size({"width": width, "height": 800})
            lending_ui.goto(f"/router/ui/lending?{path}")
            expect(lending_ui.page.locator("main table").first).to_be_visible()
            expect(lending_ui.page.locator("#connection")).to_have_text("connected")
            found = [
                f"{v['id']}: {v['help']}"
                for v in AXE.run(lending_ui.page).response["violations"]
                if v["impact"] in ("serious", "critical")
            ]
            assert not found, (path, width, found)
            overflow = lending_ui.page.evaluate(
                "document.documentElement.scrollWidth - window.innerWidth"
            )
            assert overflow <= 0, f"{path} at {width} px scrolls sideways by {overflow} px"


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_editors_pass_axe_and_fit_a_phone(lending_ui: GuardedPage, theme: str) -> None:
    check_sections(
        lending_ui, theme, ("section=links&lane=text&node=m&model=slow", "section=guardians")
    )
