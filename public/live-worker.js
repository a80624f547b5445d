// tokenscope's live stream, shared by every tab of one browser (a SharedWorker): one
// server-sent-events connection however many pages follow new data. A browser opens at most six
// HTTP/1.1 connections to a server, so a stream per tab would leave the seventh tab unable to
// load anything. Each tab says which instances it shows; the worker passes on the events that
// concern it. Event data is passed on as the server wrote it (its nanosecond times do not fit a
// JavaScript number); only the instance names are read here.
"use strict";

const tabs = new Map(); // port -> instances it shows (empty: all)
let source = null;
let link = "connecting";

function tell(port, event, data) {
  port.postMessage({ event, data });
}

function open() {
  source = new EventSource("/api/v1/live");
  source.addEventListener("open", () => {
    link = "open";
  });
  source.addEventListener("error", () => {
    link = "lost";
    for (const port of tabs.keys()) tell(port, "link", "lost");
  });
  source.addEventListener("ready", (e) => {
    link = "open";
    for (const port of tabs.keys()) tell(port, "ready", e.data);
  });
  source.addEventListener("ingested", (e) => {
    let grew;
    try {
      grew = Object.keys(JSON.parse(e.data).instances || {});
    } catch {
      return;
    }
    for (const [port, shows] of tabs) {
      if (shows.length === 0 || grew.some((i) => shows.includes(i))) tell(port, "ingested", e.data);
    }
  });
}

onconnect = (c) => {
  const port = c.ports[0];
  port.onmessage = (m) => {
    const msg = m.data || {};
    if (Array.isArray(msg.subscribe)) {
      tabs.set(port, msg.subscribe);
      if (!source) open();
      // A tab that joins an open stream is ready at once: it has just read its view.
      if (link === "open") tell(port, "ready", '{"newest_ns":null,"instances":{}}');
      else tell(port, "link", link);
    } else if (msg.bye) {
      tabs.delete(port);
      if (tabs.size === 0 && source) {
        source.close();
        source = null;
        link = "connecting";
      }
    }
  };
  port.start();
};
