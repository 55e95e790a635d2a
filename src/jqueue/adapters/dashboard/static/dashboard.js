// Live pages: every few seconds, fetch this page's main part and swap it in, unless the
// reader is typing in a form, the page is hidden, or "Live" is switched off.
(function () {
  "use strict";
  const main = document.getElementById("main");
  const toggle = document.getElementById("live-toggle");
  const stamp = document.getElementById("updated");
  if (!main) return;
  const seconds = Number(main.dataset.refresh || "2");
  let live = sessionStorage.getItem("jqueue-live") !== "off";
  function show() {
    if (toggle) toggle.setAttribute("aria-pressed", String(live));
  }
  if (toggle) {
    toggle.addEventListener("click", function () {
      live = !live;
      sessionStorage.setItem("jqueue-live", live ? "on" : "off");
      show();
    });
  }
  show();
  function busy() {
    const active = document.activeElement;
    return (active && active.closest("form") && main.contains(active) && active.tagName !== "BUTTON") ||
      main.querySelector("[data-no-refresh]") !== null;
  }
  async function refresh() {
    if (!live || document.hidden || busy()) return;
    try {
      const answer = await fetch(location.href, { headers: { "X-Dashboard-Refresh": "1" }, credentials: "same-origin" });
      if (answer.redirected || !answer.ok && answer.status !== 503) return;
      const html = await answer.text();
      if (busy()) return;
      main.innerHTML = html;
      main.dataset.version = String(Number(main.dataset.version || "0") + 1);
      if (stamp) stamp.textContent = "updated " + new Date().toLocaleTimeString();
    } catch (error) {
      if (stamp) stamp.textContent = "offline: " + error;
    }
  }
  setInterval(refresh, seconds * 1000);
})();
