function serverUrl(path) {
  const element = document.getElementById("jupyter-config-data");
  const config = element ? JSON.parse(element.textContent || "{}") : {};
  const base = (config.baseUrl || "/").replace(/\/?$/, "/");
  const headers = {};
  if (config.token) headers["Authorization"] = `token ${config.token}`;
  const xsrf = document.cookie.match(/\b_xsrf=([^;]*)/);
  if (xsrf) headers["X-XSRFToken"] = decodeURIComponent(xsrf[1]);
  return [base + path, headers];
}

export default {
  render({ model, el }) {
    const button = document.createElement("button");
    button.className = "jupyter-button mod-danger tilebench-stop";
    const sync = () => {
      button.textContent = model.get("label");
      button.disabled = model.get("disabled");
      button.style.opacity = button.disabled ? "0.5" : "1";
      button.title = model.get("hint");
      button.dataset.runId = model.get("run_id");
    };
    sync();
    model.on("change:label change:disabled change:hint change:run_id", sync);
    button.addEventListener("click", async () => {
      button.disabled = true;
      button.textContent = "Stopping…";
      model.send({ event: "stop" });
      const runId = model.get("run_id");
      if (!runId) return;
      const [url, headers] = serverUrl(`tilebench/runs/${encodeURIComponent(runId)}/stop`);
      try {
        const response = await fetch(url, { method: "POST", headers, credentials: "same-origin" });
        if (!response.ok) console.warn(`tilebench: stop request answered ${response.status}`);
      } catch (error) {
        console.warn("tilebench: stop request failed", error);
      }
    });
    el.appendChild(button);
  },
};
