// The pages read fine without this: it only makes them live, through server-sent events.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const overview = document.getElementById("overview");
  if (overview) {
    const es = new EventSource(overview.dataset.live);
    es.addEventListener("overview", (e) => { overview.innerHTML = e.data; });
  }
  const output = document.getElementById("output");
  if (output && !output.dataset.settled) {
    const es = new EventSource(output.dataset.live);
    es.addEventListener("page", (e) => {
      const p = JSON.parse(e.data);
      const span = document.createElement("span");
      span.className = p.Stream;
      span.textContent = p.Text;
      output.appendChild(span);
    });
    es.addEventListener("end", () => { es.close(); window.location.reload(); });
  }
});
