// What the agent will remember: the conversation as the server keeps it for the next turn, the
// answer to {"action": "history"} (docs/protocol.md). An answer the listener interrupted keeps
// only the words heard (interrupted: true), so a person can see that what the agent remembers
// having said is what reached the listener, not what it wrote. The page asks after each turn
// ends (the server keeps the history before it sends turn_end) and on "Ask again".

const ROLES = { user: "you", assistant: "agent" };

export class Memory {
  /** list: the <ol> of messages; note: a line about them; refresh: the "Ask again" button;
   * ask(): send {"action": "history"}, true if it was sent. */
  constructor({ list, note, refresh, ask }) {
    this.list = list;
    this.note = note;
    this.refresh = refresh;
    this.send = ask;
    this.pending = 0; // asked, not answered yet
    this.unsupported = false; // the API answered unknown_action: an older server
    this.messages = null; // the last answer's; null: none yet
    this.asOf = null; // the turn number it came after
    this.dirty = true;
    refresh.addEventListener("click", () => this.ask());
  }

  ask() {
    if (!this.unsupported && this.send()) this.pending += 1;
  }

  /** A history frame came: {messages: [{role, text, interrupted}]}. */
  show(frame, turnNumber) {
    this.pending = Math.max(0, this.pending - 1);
    this.messages = Array.isArray(frame.messages) ? frame.messages : [];
    this.asOf = turnNumber;
    this.dirty = true;
  }

  /** An error that refuses our history action (an API from before it): the panel says so, and
   * the page stops asking. True when the error was that (the page then shows nothing else). */
  refused(frame) {
    const ours = frame.code === "unknown_action" && /action\W+history\b/.test(frame.message || "");
    if (!ours || this.pending === 0) return false;
    this.unsupported = true;
    this.pending = 0;
    this.dirty = true;
    return true;
  }

  render(open) {
    this.refresh.disabled = !open || this.unsupported;
    if (!this.dirty) return; // the list is rebuilt only when an answer came
    this.dirty = false;
    const messages = this.messages || [];
    const cut = messages.filter((message) => message.interrupted).length;
    if (this.unsupported) {
      this.note.textContent = "This API does not say what the agent remembers (no history action).";
    } else if (this.messages === null) {
      this.note.textContent = "Asked for after each turn: nothing yet.";
    } else if (!messages.length) {
      this.note.textContent = `After turn ${this.asOf ?? "–"}: nothing.`;
    } else {
      this.note.textContent =
        `After turn ${this.asOf ?? "–"}: ${messages.length} ` +
        `${messages.length === 1 ? "message" : "messages"}` +
        (cut ? `, ${cut} interrupted (the agent keeps only the words heard)` : "") +
        ".";
    }
    this.list.replaceChildren(...messages.map(item));
  }
}

function item(message) {
  const li = document.createElement("li");
  const role = typeof message.role === "string" ? message.role : "?";
  li.className = `message role-${role.replace(/\W+/g, "-")}`;
  li.dataset.role = role;
  const who = document.createElement("span");
  who.className = "who";
  who.textContent = ROLES[role] || role;
  const text = document.createElement("span");
  text.className = "said";
  text.textContent = typeof message.text === "string" ? message.text : "";
  li.append(who, text);
  if (message.interrupted) {
    li.classList.add("interrupted");
    const tag = document.createElement("span");
    tag.className = "tag";
    tag.textContent = text.textContent ? "interrupted: the words heard" : "interrupted: none heard";
    li.append(tag);
  }
  return li;
}
