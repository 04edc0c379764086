"use strict";
// Example tables: rows arrive as JSON ([id, reward, prompt, completion, answer, error, flip,
// line in results.jsonl (an unfinished run's: checkpoint.jsonl), rollout rewards, the
// prompt's last user message, each rollout's plays of a seat played several times, each
// rollout's parsed answer]) and are rendered a page at a time, so a report of 100,000
// examples opens as fast as one of ten. Model text is only ever set as text (textContent),
// never as markup.
// The comparison view's tables of disagreements ([id, reference's row, challenger's row,
// flip]) point into the same rows.
(function () {
  const PAGE = 100;
  const SNIPPET = 90;
  const SOLVED = Number(document.body.dataset.solved || "0.5");
  const ID = 0, REWARD = 1, PROMPT = 2, COMPLETION = 3, ANSWER = 4, ERROR = 5, FLIP = 6, LINE = 7, ROLLOUTS = 8, QUESTION = 9, PLAYS = 10, PARSED = 11;
  const ROWS = new Map();

  // A run's rows, parsed once (the example table and the comparison view share them).
  function rowsOf(key) {
    if (!ROWS.has(key)) {
      const script = document.querySelector(`script.rows-data[data-bench="${key}"]`);
      ROWS.set(key, JSON.parse(script.textContent));
      script.remove(); // the parsed rows are the only copy kept
    }
    return ROWS.get(key);
  }
  // What differs from row to row: the last user message, else the whole prompt.
  function question(row) {
    return row[QUESTION] || row[PROMPT];
  }
  // A completion without the role every one of them starts with.
  function answerText(row) {
    return (row[COMPLETION] || "").replace(/^assistant: /, "");
  }
  // The answer the environment's parser read, per rollout ("12 | 13" for two that differ);
  // null when the environment has no parser of its own.
  function parsed(row) {
    const answers = row[PARSED];
    if (!answers) return null;
    const shown = answers.map(a => a === null ? "–" : a);
    return new Set(shown).size === 1 ? shown[0] : shown.join(" | ");
  }
  // What decides an answer's reward: its parsed answer, else the end of the completion.
  function decisive(row) {
    const answer = parsed(row);
    return answer === null ? ending(answerText(row)) : snippet(answer);
  }
  function fixed(reward) {
    return reward === null ? "–" : reward.toFixed(3);
  }

  function snippet(text) {
    const flat = (text || "").replace(/\s+/g, " ").trim();
    return flat.length > SNIPPET ? flat.slice(0, SNIPPET) + "…" : flat;
  }
  // The end of a long text, where a completion's answer is.
  function ending(text) {
    const flat = (text || "").replace(/\s+/g, " ").trim();
    return flat.length > SNIPPET ? "…" + flat.slice(-SNIPPET) : flat;
  }
  function cell(tr, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }
  // A heading and its text; ``atEnd``: the text is shown scrolled to its end (a completion,
  // whose answer is there).
  // A cell cut on its left when too narrow, so that the text's end stays in sight.
  function endCell(tr, text, cls) {
    const td = cell(tr, "", cls + " ends");
    td.appendChild(Object.assign(document.createElement("span"), {textContent: text}));
    return td;
  }
  function block(parent, label, text, atEnd) {
    if (!text) return;
    const h = document.createElement("h4");
    h.textContent = label;
    const pre = document.createElement("pre");
    pre.textContent = text;
    if (atEnd) pre.className = "end";
    parent.append(h, pre);
  }

  // What both kinds of table share: a filter, pages of PAGE rows, rows that unfold.
  function Paged(details) {
    this.details = details;
    this.filter = "all";
    this.page = 0;
    this.shown = [];
    this.open = new Set();
    this.body = details.querySelector("tbody");
    this.count = details.querySelector(".count");
    this.pageLabel = details.querySelector(".page");
  }
  Paged.prototype.render = function () {
    const pages = Math.max(1, Math.ceil(this.shown.length / PAGE));
    this.page = Math.min(this.page, pages - 1);
    const frag = document.createDocumentFragment();
    for (const item of this.shown.slice(this.page * PAGE, (this.page + 1) * PAGE)) this.row(frag, item);
    this.body.replaceChildren(frag);
    for (const pre of this.body.querySelectorAll("pre.end")) pre.scrollTop = pre.scrollHeight;
    const total = this.total();
    this.count.textContent = this.shown.length === total ? `${total} examples` : `${this.shown.length} of ${total} examples`;
    this.pageLabel.textContent = `page ${this.page + 1} of ${pages}`;
    this.details.querySelector('[data-page="prev"]').disabled = this.page === 0;
    this.details.querySelector('[data-page="next"]').disabled = this.page >= pages - 1;
  };
  Paged.prototype.toggle = function (key) {
    if (this.open.has(key)) this.open.delete(key); else this.open.add(key);
    this.render();
  };
  // The id cell: a button that unfolds the row, and the flip's arrow.
  function idCell(tr, id, flip, lost, gained) {
    const button = Object.assign(document.createElement("button"), {type: "button", className: "open", textContent: id});
    button.setAttribute("aria-expanded", "false");
    const td = cell(tr, "", "id");
    td.appendChild(button);
    if (flip === 1) td.appendChild(Object.assign(document.createElement("span"), {className: "flip lost", textContent: "▼", title: lost}));
    if (flip === 2) td.appendChild(Object.assign(document.createElement("span"), {className: "flip gained", textContent: "▲", title: gained}));
    return button;
  }
  function detailRow(colSpan) {
    const tr = Object.assign(document.createElement("tr"), {className: "detail"});
    const td = Object.assign(document.createElement("td"), {colSpan});
    tr.appendChild(td);
    return [tr, td];
  }
  // Loads a table when its <details> opens; filters, pages and unfolding rows.
  function wire(table) {
    const details = table.details;
    details.addEventListener("toggle", () => { if (details.open) table.load(); });
    if (details.open) table.load();
    for (const button of details.querySelectorAll("[data-filter]")) {
      button.addEventListener("click", () => {
        for (const other of details.querySelectorAll("[data-filter]")) other.setAttribute("aria-pressed", String(other === button));
        table.filter = button.dataset.filter;
        table.apply();
      });
    }
    details.querySelector('[data-page="prev"]').addEventListener("click", () => { table.page -= 1; table.render(); });
    details.querySelector('[data-page="next"]').addEventListener("click", () => { table.page += 1; table.render(); });
    table.body.addEventListener("click", (event) => {
      const button = event.target.closest("button.open");
      if (button) table.toggle(table.keyOf(button.closest("tr")));
    });
  }

  // A run's examples.
  function Table(details) {
    Paged.call(this, details);
    this.rows = null;
    this.query = "";
  }
  Table.prototype = Object.create(Paged.prototype);
  Table.prototype.load = function () {
    if (this.rows !== null) return;
    this.rows = rowsOf(this.details.dataset.bench);
    this.haystack = null;
    this.apply();
  };
  Table.prototype.total = function () { return this.rows.length; };
  Table.prototype.keyOf = function (tr) { return Number(tr.dataset.index); };
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
      this.haystack = this.rows.map(r => [r[ID], r[QUESTION] || "", r[PROMPT], r[COMPLETION], parsed(r) || "", r[ANSWER], r[ERROR] || ""].join("\u0000").toLowerCase());
    }
    const shown = [];
    for (let i = 0; i < this.rows.length; i++) {
      if (this.matches(this.rows[i]) && (!q || this.haystack[i].includes(q))) shown.push(i);
    }
    this.shown = shown;
    this.page = 0;
    this.render();
  };
  Table.prototype.row = function (frag, index) {
    const row = this.rows[index];
    const tr = document.createElement("tr");
    tr.className = "row";
    tr.dataset.index = String(index);
    tr.dataset.id = row[ID];
    if (row[ERROR] !== null) tr.classList.add("errored");
    else if (row[REWARD] < SOLVED) tr.classList.add("missed");
    const button = idCell(tr, row[ID], row[FLIP], "solved before, missed now", "missed before, solved now");
    cell(tr, fixed(row[REWARD]), "reward");
    cell(tr, snippet(question(row)), "text").title = "the last user message; open the example for the whole prompt";
    endCell(tr, ending(answerText(row)), "text completion").title = "the end of the completion; open the example for all of it";
    const answer = parsed(row);
    const parsedCell = cell(tr, answer === null ? "–" : snippet(answer), "parsed");
    if (answer === null) parsedCell.title = "the environment has no parser of its own: its reward reads the completion";
    cell(tr, snippet(row[ANSWER]), "answer");
    cell(tr, row[ERROR] === null ? "" : snippet(row[ERROR]), "error");
    frag.appendChild(tr);
    if (!this.open.has(index)) return;
    button.setAttribute("aria-expanded", "true");
    const [detail, td] = detailRow(7);
    const info = document.createElement("p");
    info.className = "muted";
    const parts = [`example ${row[ID]}`];
    if (row[REWARD] !== null) parts.push(`mean reward ${row[REWARD].toFixed(3)}`);
    if (row[ROLLOUTS]) parts.push(`rollouts: ${row[ROLLOUTS].map(r => r.toFixed(3)).join(", ")}`);
    // A seat played several times: each rollout's reward is the mean of these plays.
    if (row[PLAYS]) parts.push(`attempts: ${row[PLAYS].map(plays => plays.map(r => r === null ? "error" : r.toFixed(3)).join(", ")).join(" | ")}`);
    if (row[LINE] !== null) parts.push(`${this.details.dataset.records || "results.jsonl"} line ${row[LINE]}`);
    info.textContent = parts.join(" · ");
    td.appendChild(info);
    block(td, "prompt", row[PROMPT]);
    block(td, "completion", row[COMPLETION], true);
    block(td, "parsed answer", answer);
    block(td, "expected answer", row[ANSWER]);
    block(td, "error", row[ERROR]);
    frag.appendChild(detail);
  };

  for (const details of document.querySelectorAll("details.examples")) {
    const table = new Table(details);
    wire(table);
    let timer = null;
    details.querySelector('input[type="search"]').addEventListener("input", (event) => {
      clearTimeout(timer);
      timer = setTimeout(() => { table.query = event.target.value; table.apply(); }, 150);
    });
  }

  // The comparison view: per model compared with the reference, the examples where their
  // rewards differ, filterable to the flips in either direction.
  function Diffs(details) {
    Paged.call(this, details);
    this.entries = null;
  }
  Diffs.prototype = Object.create(Paged.prototype);
  Diffs.prototype.load = function () {
    if (this.entries !== null) return;
    const script = this.details.querySelector("script.diff-data");
    this.entries = JSON.parse(script.textContent);
    script.remove();
    this.reference = rowsOf(this.details.dataset.reference);
    this.challenger = rowsOf(this.details.dataset.challenger);
    this.apply();
  };
  Diffs.prototype.total = function () { return this.entries.length; };
  Diffs.prototype.keyOf = function (tr) { return tr.dataset.id; };
  Diffs.prototype.apply = function () {
    const want = {all: null, lost: 1, gained: 2}[this.filter];
    this.shown = this.entries.filter(e => want === null || e[3] === want);
    this.page = 0;
    this.render();
  };
  Diffs.prototype.row = function (frag, entry) {
    const [id, refIndex, newIndex, flip] = entry;
    const ref = this.reference[refIndex], row = this.challenger[newIndex];
    const tr = document.createElement("tr");
    tr.className = "row";
    tr.dataset.id = id;
    tr.dataset.flip = String(flip);
    const button = idCell(tr, id, flip, "solved by the reference, missed by this model", "missed by the reference, solved by this model");
    cell(tr, fixed(ref[REWARD]), "reward reference");
    cell(tr, fixed(row[REWARD]), "reward challenger");
    cell(tr, snippet(question(row)), "text");
    endCell(tr, decisive(ref), "parsed reference");
    endCell(tr, decisive(row), "parsed challenger");
    cell(tr, snippet(row[ANSWER]), "answer");
    frag.appendChild(tr);
    if (!this.open.has(id)) return;
    button.setAttribute("aria-expanded", "true");
    const [detail, td] = detailRow(7);
    block(td, "prompt", row[PROMPT]);
    block(td, `reference's completion (reward ${fixed(ref[REWARD])}${parsedLabel(ref)})`, ref[COMPLETION], true);
    block(td, `this model's completion (reward ${fixed(row[REWARD])}${parsedLabel(row)})`, row[COMPLETION], true);
    block(td, "expected answer", row[ANSWER]);
    frag.appendChild(detail);
  };

  function parsedLabel(row) {
    const answer = parsed(row);
    return answer === null ? "" : `, parsed answer ${answer}`;
  }

  for (const details of document.querySelectorAll("details.disagreements")) wire(new Diffs(details));
  document.body.dataset.ready = "1";
})();
