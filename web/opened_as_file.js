// A classic script, not a module: browsers do not load modules from file:// pages, so this is
// the one part of the page that runs when it is opened as a file, to say how to open it instead.
if (location.protocol === "file:") {
  addEventListener("DOMContentLoaded", () => {
    document.getElementById("status").textContent =
      "This page must come from a web server, not a file: run `voicewire up` and open " +
      "http://127.0.0.1:8000/, or serve this folder (python3 -m http.server -d web).";
  });
}
