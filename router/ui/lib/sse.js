// The one live channel: an EventSource on /router/v1/events.
// - reconnects itself with backoff 1, 2, 4, 5, 5 ... seconds (the browser's own retry is
//   replaced, so the delays are ours and the badge is honest);
// - onstatus('connected' | 'disconnected') for the header badge;
// - on every (re)connect the stream is opened FIRST, then the resync hooks run (pages fetch
//   their snapshot), so nothing that happens between snapshot and stream is lost;
// - within one stream an event whose id is below the last one seen is dropped; a `resync`
//   (or the older bus's `dropped`) event reruns the hooks;
// - a hidden tab closes the stream (nothing is polled) and reconnects + resyncs when shown;
// - the browser's offline/online events close and reopen it.

import { apiUrl } from './api.js';

export const BACKOFF_SECONDS = [1, 2, 4, 5];
// Named events EventSource must listen for (onmessage sees only unnamed ones).
// docs/events.md lists them.
export const EVENT_NAMES = [
  'hello', 'state', 'loading', 'load_progress', 'ready', 'failed', 'unloading', 'unloaded',
  'activity', 'queue_position', 'catalog', 'benchmark_started', 'benchmark_section', 'benchmark_finished',
  'download', 'store_replaced', 'message',
];
const RESYNC_NAMES = ['resync', 'dropped'];

export function backoffDelay(attempt) {
  return BACKOFF_SECONDS[Math.min(attempt, BACKOFF_SECONDS.length - 1)] * 1000;
}

export function createEvents({ path = '/events', onstatus = () => {}, names = EVENT_NAMES } = {}) {
  const handlers = new Set();
  const resyncs = new Set();
  let source = null;
  let timer = null;
  let attempt = 0;
  let lastId = null;
  let status = 'disconnected';
  let stopped = false;

  const setStatus = (next) => {
    if (next === status) return;
    status = next;
    onstatus(next);
  };
  const runResync = () => {
    for (const fn of resyncs) fn();
  };
  const deliver = (name, message) => {
    // Ids grow within one stream (the snapshot's events share the current id); a new stream
    // may start again at 1 after a router restart, so `lastId` is per connection.
    const id = message.lastEventId ? Number(message.lastEventId) : null;
    if (id !== null && Number.isFinite(id)) {
      if (lastId !== null && id < lastId) return;
      lastId = id;
    }
    let data;
    try {
      data = JSON.parse(message.data);
    } catch {
      return; // a heartbeat or a foreign line: nothing to apply
    }
    const event = { event: name, ...data };
    // A job's stream replays its history from the id a new stream starts after (downloads).
    if (id !== null && Number.isFinite(id)) event.event_id = id;
    for (const fn of handlers) fn(event);
  };

  function open() {
    clearTimeout(timer);
    timer = null;
    if (stopped || source) return;
    source = new EventSource(apiUrl(path), { withCredentials: true });
    source.addEventListener('open', () => {
      attempt = 0;
      lastId = null;
      setStatus('connected');
      runResync();
    });
    source.addEventListener('error', () => {
      close();
      setStatus('disconnected');
      if (!stopped && document.visibilityState !== 'hidden') {
        timer = setTimeout(open, backoffDelay(attempt++));
      }
    });
    for (const name of names) source.addEventListener(name, (m) => deliver(name, m));
    for (const name of RESYNC_NAMES) source.addEventListener(name, runResync);
  }

  function close() {
    if (source) source.close();
    source = null;
  }

  const onVisibility = () => {
    if (document.visibilityState === 'hidden') {
      close();
      clearTimeout(timer);
      setStatus('disconnected');
    } else {
      open();
    }
  };
  document.addEventListener('visibilitychange', onVisibility);
  // An open stream to a LAN host can outlive the network for a long while: trust the
  // browser's offline signal, and reconnect (and so resync) at once when it comes back.
  const onOffline = () => {
    close();
    clearTimeout(timer);
    setStatus('disconnected');
  };
  const onOnline = () => {
    attempt = 0;
    open();
  };
  window.addEventListener('offline', onOffline);
  window.addEventListener('online', onOnline);

  return {
    start: open,
    get status() {
      return status;
    },
    // fn(event) for every event; returns an unsubscribe function.
    subscribe(fn) {
      handlers.add(fn);
      return () => handlers.delete(fn);
    },
    // fn() after every (re)connect and on a server resync request; returns an unsubscribe.
    onresync(fn) {
      resyncs.add(fn);
      if (status === 'connected') fn();
      return () => resyncs.delete(fn);
    },
    stop() {
      stopped = true;
      close();
      clearTimeout(timer);
      document.removeEventListener('visibilitychange', onVisibility);
      window.removeEventListener('offline', onOffline);
      window.removeEventListener('online', onOnline);
    },
  };
}

// Live state kept right across reconnects: `load()` fetches a snapshot, `reduce(state, event)`
// applies one event. The stream is open before the snapshot is read, so every change the
// snapshot may have missed arrives as an event: events that come while the snapshot is in
// flight are kept and applied on top of it, in order (reducers set per-key state, so a replayed
// older event is overwritten by the newer one that follows). A reducer returns RESYNC for an
// event only the server can apply; that fetches the snapshot again.
export function liveState(events, { load, reduce, render, onerror = () => {} }) {
  let state = null;
  let inFlight = false;
  let again = false;
  let closed = false;
  let pending = [];

  // Applies events to the current state; true when one of them asked for a fresh snapshot.
  function apply(list) {
    let resyncNeeded = false;
    for (const event of list) {
      const next = reduce(state, event);
      if (next === RESYNC) resyncNeeded = true;
      else state = next;
    }
    return resyncNeeded;
  }

  async function resync() {
    if (inFlight) {
      again = true;
      return;
    }
    inFlight = true;
    again = false;
    pending = [];
    try {
      const snapshot = await load();
      if (closed) return;
      state = snapshot;
      const queued = pending;
      pending = [];
      if (apply(queued)) again = true;
      render(state);
    } catch (exc) {
      if (!closed) onerror(exc);
    } finally {
      inFlight = false;
    }
    if (again && !closed) resync();
  }

  const offEvent = events.subscribe((event) => {
    if (inFlight || state === null) {
      pending.push(event);
      if (pending.length > 1000) {
        pending = []; // a snapshot fetched afterwards is newer than all of them
        again = true;
      }
      return;
    }
    if (apply([event])) resync();
    else render(state);
  });
  const offResync = events.onresync(resync);
  return {
    resync,
    get state() {
      return state;
    },
    // A local change the server answered for (an action's reply), rendered at once.
    set(next) {
      state = next;
      render(state);
    },
    close() {
      closed = true;
      offEvent();
      offResync();
    },
  };
}

// A reducer returns RESYNC when an event cannot be applied locally (fetch the snapshot again).
export const RESYNC = Symbol('resync');
