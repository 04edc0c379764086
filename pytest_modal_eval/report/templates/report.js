"use strict";
// Example tables: rows arrive as JSON ([id, reward, prompt, completion, answer, error, flip,
// results.jsonl line, rollout rewards]) and are rendered a page at a time, so a report of
// 100,000 examples opens as fast as one of ten.
(function () {
  const PAGE = 100;
  const SNIPPET = 90;
  const SOLVED = Number(document.body.dataset.solved || "0.5");
  const ID = 0, REWARD = 1, PROMPT = 2, COMPLETION = 3, ANSWER = 4, ERROR = 5, FLIP = 6, LINE = 7, ROLLOUTS = 8;

  function snippet(text) {
    const flat = (text || "").replace(/\s+/g, " ").trim();
    return flat.length > SNIPPET ? flat.slice(0, SNIPPET) + "…" : flat;
  }
  function cell(tr, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }
  function block(parent, label, text) {
    if (!text) return;
    const h = document.createElement("h4");
    h.textContent = label;
    const pre = document.createElement("pre");
    pre.textContent = text;
    parent.append(h, pre);
  }

  function Table(details) {
    this.details = details;
    this.rows = null;
    this.filter = "all";
    this.query = "";
    this.page = 0;
    this.shown = [];
    this.open = new Set();
    this.body = details.querySelector("tbody");
    this.count = details.querySelector(".count");
    this.pageLabel = details.querySelector(".page");
  }
  Table.prototype.load = function () {
    if (this.rows !== null) return;
    const script = this.details.querySelector("script.rows-data");
    this.rows = JSON.parse(script.textContent);
    script.remove(); // the parsed rows are the only copy kept
    this.haystack = null;
    this.apply();
  };
  Table.prototype.matches = function (row) {
    switch (this.filter) {
      case "missed": return row[REWARD] !== null && row[REWARD] < SOLVED;
      case "errored": return row[ERROR] !== null;
      case "flipped": return row[FLIP] !== 0;
      default: return true;
    }
  };
  Table.prototype.apply = function () {
    const q = this.query.toLowerCase();
    if (q && this.haystack === null) {
      // Built on the first search only: lower-cased text of each row.
      this.haystack = this.rows.map(r => [r[ID], r[PROMPT], r[COMPLETION], r[ANSWER], r[ERROR] || ""].join("\u0000").toLowerCase());
    }
    const shown = [];
    for (let i = 0; i < this.rows.length; i++) {
      if (this.matches(this.rows[i]) && (!q || this.haystack[i].includes(q))) shown.push(i);
    }
    this.shown = shown;
    this.page = 0;
    this.render();
  };
  Table.prototype.render = function () {
    const pages = Math.max(1, Math.ceil(this.shown.length / PAGE));
    this.page = Math.min(this.page, pages - 1);
    const first = this.page * PAGE;
    const frag = document.createDocumentFragment();
    for (const index of this.shown.slice(first, first + PAGE)) {
      const row = this.rows[index];
      const tr = document.createElement("tr");
      tr.className = "row";
      tr.dataset.index = String(index);
      tr.dataset.id = row[ID];
      if (row[ERROR] !== null) tr.classList.add("errored");
      else if (row[REWARD] < SOLVED) tr.classList.add("missed");
      const idCell = cell(tr, "", "id");
      const button = document.createElement("button");
      button.type = "button";
      button.className = "open";
      button.textContent = row[ID];
      button.setAttribute("aria-expanded", "false");
      idCell.appendChild(button);
      if (row[FLIP] === 1) idCell.appendChild(Object.assign(document.createElement("span"), {className: "flip lost", textContent: "▼", title: "solved before, missed now"}));
      if (row[FLIP] === 2) idCell.appendChild(Object.assign(document.createElement("span"), {className: "flip gained", textContent: "▲", title: "missed before, solved now"}));
      cell(tr, row[REWARD] === null ? "–" : row[REWARD].toFixed(3), "reward");
      cell(tr, snippet(row[PROMPT]), "text");
      cell(tr, snippet(row[COMPLETION]), "text");
      cell(tr, snippet(row[ANSWER]), "answer");
      cell(tr, row[ERROR] === null ? "" : snippet(row[ERROR]), "error");
      frag.appendChild(tr);
      if (this.open.has(index)) frag.appendChild(this.detail(row, button));
    }
    this.body.replaceChildren(frag);
    const total = this.rows.length;
    this.count.textContent = this.shown.length === total ? `${total} examples` : `${this.shown.length} of ${total} examples`;
    this.pageLabel.textContent = `page ${this.page + 1} of ${pages}`;
    this.details.querySelector('[data-page="prev"]').disabled = this.page === 0;
    this.details.querySelector('[data-page="next"]').disabled = this.page >= pages - 1;
  };
  Table.prototype.detail = function (row, button) {
    button.setAttribute("aria-expanded", "true");
    const tr = document.createElement("tr");
    tr.className = "detail";
    const td = document.createElement("td");
    td.colSpan = 6;
    const info = document.createElement("p");
    info.className = "muted";
    const parts = [`example ${row[ID]}`];
    if (row[REWARD] !== null) parts.push(`mean reward ${row[REWARD].toFixed(3)}`);
    if (row[ROLLOUTS]) parts.push(`rollouts: ${row[ROLLOUTS].map(r => r.toFixed(3)).join(", ")}`);
    if (row[LINE] !== null) parts.push(`results.jsonl line ${row[LINE]}`);
    info.textContent = parts.join(" · ");
    td.appendChild(info);
    block(td, "prompt", row[PROMPT]);
    block(td, "completion", row[COMPLETION]);
    block(td, "answer", row[ANSWER]);
    block(td, "error", row[ERROR]);
    tr.appendChild(td);
    return tr;
  };
  Table.prototype.toggle = function (index) {
    if (this.open.has(index)) this.open.delete(index); else this.open.add(index);
    this.render();
  };

  for (const details of document.querySelectorAll("details.examples")) {
    const table = new Table(details);
    details.addEventListener("toggle", () => { if (details.open) table.load(); });
    if (details.open) table.load();
    for (const button of details.querySelectorAll("[data-filter]")) {
      button.addEventListener("click", () => {
        for (const other of details.querySelectorAll("[data-filter]")) other.setAttribute("aria-pressed", String(other === button));
        table.filter = button.dataset.filter;
        table.apply();
      });
    }
    let timer = null;
    details.querySelector('input[type="search"]').addEventListener("input", (event) => {
      clearTimeout(timer);
      timer = setTimeout(() => { table.query = event.target.value; table.apply(); }, 150);
    });
    details.querySelector('[data-page="prev"]').addEventListener("click", () => { table.page -= 1; table.render(); });
    details.querySelector('[data-page="next"]').addEventListener("click", () => { table.page += 1; table.render(); });
    table.body.addEventListener("click", (event) => {
      const button = event.target.closest("button.open");
      if (button) table.toggle(Number(button.closest("tr").dataset.index));
    });
  }
  document.body.dataset.ready = "1";
})();
