// Speech in: Listen (or Space held) asks the API for a Transcribe URL (`listen`), starts the
// microphone and streams it there; listening.js says when the person's turn ends (their words
// are then asked as typed ones are) and when their voice stops the agent (Stop's path: cancel
// with heard_ms). Each URL opens one Transcribe session: after each turn the page asks for the
// next one, and the audio in between waits for it. The audio never passes through the API.
//
// The parts: microphone.js (the microphone, and its audio thread microphone_worklet.js),
// transcribe_stream.js (Amazon Transcribe's streaming WebSocket), listening.js (when a turn
// ends, barge-in, the agent's echo). app.js makes one `speechIn` and gives it the page's link,
// player and the agent's turn (`agent`): what it asks of the turn is all it knows of the page.

import { Microphone, meterValue, microphoneTrouble } from "./microphone.js";
import { TranscribeStream } from "./transcribe_stream.js";
import { EchoGate, TurnTaking, stepLevels } from "./listening.js";

const $ = (id) => document.getElementById(id);

const OFFER_WAIT_MS = 15_000;
const MAX_STREAM_FAILURES = 3; // in a row, then listening stops and says why
const BACKLOG_CHUNKS = 200; // 10 s of 50 ms chunks wait for a stream, at most
const TICK_MS = 100; // listening.js's timers (the end of a turn) are checked this often
// Error codes that say this API takes no speech: the button stays off, its title says why.
const NO_SPEECH = new Set(["listen_unavailable", "unsupported_language", "unknown_action"]);
// Error codes that refuse this listen only: the person may press Listen again later.
const LISTEN_REFUSALS = new Set(["too_many_listens", "listen_failed"]);
const LISTEN_STATES = {
  idle: "off",
  listening: "listening",
  hearing: "hearing you",
  ending: "finishing",
};

/**
 * Speech in for the page. `agent`: turn() (the turn whose audio plays, or null), heardMs(turn),
 * hold(turn) and resume(turn) (a possible backchannel), stop() (Stop's path), ask(text).
 */
export function speechIn({ link, player, changed, agent }) {
  const speech = {
    mode: null, // "open" (Listen pressed: hands-free), "push" (Space held); null: not listening
    context: null, // the AudioContext the microphone is captured in (made in a click or key press)
    mic: null,
    stream: null, // the TranscribeStream in use; null while a listen is being answered
    generation: 0, // of sessions asked for: an answer for an older one is left unused
    backlog: [], // the audio while no stream is open: sent to the next one
    rate: 16000, // the offer's sample rate
    offers: [], // listen actions sent, not answered yet: {resolve, reject, timer}
    unavailable: "", // why this API takes no speech (listen_unavailable): the button stays off
    failures: 0, // Transcribe streams failed in a row
    releasing: false, // push-to-talk released: the stream ends, its last results are awaited
    line: null, // the live line while the person speaks: {text, final: false}
    note: "", // said after the state (didn't catch that, an error...)
    noteKind: "",
    timer: 0,
    stats: {
      listens: 0,
      streams: 0,
      chunks: 0,
      bargeIns: 0,
      holds: 0,
      resumes: 0,
      turns: 0,
      maxRunMs: 0,
      events: [],
    },
  };
  // The last barge-in on the page's clock (performance.now() ms), for `voicewire bench bargein`:
  // voiceAt, the utterance's first microphone chunk the worklet marked as voice (the person's
  // first sound as the page hears it; null for push-to-talk), and stoppedAt, when the player was
  // silenced for it (the hold's start, when a hold came first). The last hold likewise: voiceAt,
  // heldAt, and resumedAt if the agent went on (a backchannel, echo or noise).
  speech.stats.bargeIn = null;
  speech.stats.hold = null;
  // The agent's own voice coming back through the microphone: the player's audio (handleAudio)
  // against the microphone's (heardChunk), 10 ms levels on the page's clock (listening.js).
  const echoGate = new EchoGate();
  const turnTaking = new TurnTaking({
    agent: {
      speaking: () => {
        const turn = agent.turn();
        return Boolean(turn && !turn.stopped && player.playing > 0);
      },
      // The agent's words heard around now: its voice coming back is no barge-in (listening.js).
      wordsAround: (backMs, aheadMs) => {
        const turn = agent.turn();
        if (!turn) return [];
        const at = agent.heardMs(turn);
        return turn.follower.words
          .filter((word) => word.end >= at - backMs && word.start <= at + aheadMs)
          .map((word) => word.text);
      },
    },
    on: (event) => heardEvent(event),
  });

  /** Send listen; resolves with the listen frame, rejects with the error frame's
   * {code, message}. */
  function listen() {
    return new Promise((resolve, reject) => {
      if (!link.send({ action: "listen" })) {
        reject(new Error("not connected: press Connect first"));
        return;
      }
      speech.stats.listens += 1;
      const offer = { resolve, reject };
      offer.timer = setTimeout(() => {
        speech.offers = speech.offers.filter((o) => o !== offer);
        reject(new Error(`the API did not answer listen within ${OFFER_WAIT_MS / 1000} s`));
      }, OFFER_WAIT_MS);
      speech.offers.push(offer);
    });
  }

  function offered(frame) {
    const offer = speech.offers.shift();
    if (!offer) return;
    clearTimeout(offer.timer);
    offer.resolve(frame);
  }

  /** An error frame that answers a listen (it names no turn): true if it was one. */
  function listenRefused(frame) {
    if (!speech.offers.length || frame.turn_id) return false;
    const ours =
      NO_SPEECH.has(frame.code) ||
      LISTEN_REFUSALS.has(frame.code) ||
      frame.code === "invalid_field";
    if (!ours || (frame.code === "unknown_action" && !/\blisten\b/.test(frame.message || ""))) {
      return false;
    }
    const offer = speech.offers.shift();
    clearTimeout(offer.timer);
    offer.reject(Object.assign(new Error(frame.message), { code: frame.code }));
    return true;
  }

  function rejectOffers(why) {
    for (const offer of speech.offers.splice(0)) {
      clearTimeout(offer.timer);
      offer.reject(new Error(why));
    }
  }

  /** The AudioContext the microphone is captured in: at the device's own rate (the worklet
   * resamples), made in a gesture, as browsers want. */
  function captureContext() {
    if (!speech.context || speech.context.state === "closed") {
      speech.context = new AudioContext({ latencyHint: "interactive" });
    }
    if (speech.context.state === "suspended") speech.context.resume();
    return speech.context;
  }

  function note(text, kind = "info") {
    speech.note = text;
    speech.noteKind = text ? kind : "";
    changed();
  }

  /** Start listening, in a click or a key press: "open" (Listen: hands-free, turns end when the
   * person pauses) or "push" (Space held: the turn ends at its release). */
  async function startListening(mode) {
    if (speech.mode || speech.unavailable) return;
    if (!link.isOpen) {
      note("Not connected: press Connect first.", "error");
      return;
    }
    speech.mode = mode;
    speech.failures = 0;
    speech.releasing = false;
    speech.line = null;
    note("");
    player.ensureContext(); // in the gesture: the answer to what is said must be heard
    captureContext();
    turnTaking.start(mode); // push-to-talk over the agent's voice stops it at once
    echoGate.restart();
    clearInterval(speech.timer);
    speech.timer = setInterval(() => turnTaking.tick(), TICK_MS);
    const mic = new Microphone({
      context: captureContext,
      rate: speech.rate,
      onChunk: heardChunk,
      onEnded: () => stopListening("The microphone went away (unplugged, or turned off).", "error"),
    });
    speech.mic = mic;
    openSession();
    try {
      await mic.start();
    } catch (error) {
      if (speech.mic !== mic) return; // stopped meanwhile
      const trouble = microphoneTrouble(error);
      stopListening(trouble.message, "error");
      $("mic").dataset.trouble = trouble.kind;
      return;
    }
    delete $("mic").dataset.trouble;
    changed();
  }

  /** Stop listening (Listen pressed again, an error): what was being said is dropped. */
  function stopListening(text = "", kind = "info") {
    finishPush();
    turnTaking.stop();
    note(text, kind);
  }

  /** Space released: the microphone stops, the stream ends, its last results decide the turn. */
  function releasePush() {
    if (speech.mode !== "push" || speech.releasing) return;
    speech.releasing = true;
    speech.mic?.stop(); // what comes after the release is not part of the turn
    speech.mic = null;
    turnTaking.release();
    speech.stream?.end(); // none yet: openSession ends the one it opens
    changed();
  }

  /** A 50 ms chunk of the microphone: to the turn-taking (its voice less the agent's echo), the
   * meter and Transcribe. */
  function heardChunk(chunk) {
    speech.stats.chunks += 1;
    const levels = stepLevels(new DataView(chunk.pcm), speech.rate);
    const echoMs = echoGate.heard(performance.now(), levels);
    $("mic-level").value = meterValue(chunk.level);
    turnTaking.audio({ ...chunk, echoMs });
    speech.stats.maxRunMs = Math.max(speech.stats.maxRunMs, turnTaking.utterance.runMs);
    if (!speech.mode) return;
    if (speech.stream) {
      speech.stream.send(chunk.pcm);
    } else {
      speech.backlog.push(chunk.pcm);
      if (speech.backlog.length > BACKLOG_CHUNKS) speech.backlog.shift();
    }
  }

  /** A new Transcribe session: ask for its URL (each opens one session), open it, and send the
   * audio that waited for it. */
  async function openSession() {
    const generation = ++speech.generation;
    speech.stream = null;
    let offer;
    try {
      offer = await listen();
    } catch (error) {
      if (generation !== speech.generation) return;
      if (NO_SPEECH.has(error.code)) {
        speech.unavailable =
          error.code === "unknown_action"
            ? "This API does not take speech (it has no listen action): type instead."
            : error.message;
        stopListening(speech.unavailable, "unavailable");
      } else if (error.code === "too_many_listens") {
        // This connection asked for more Transcribe URLs a minute than the API gives one: a page
        // caught in a loop, or a person pressing Listen over and over. Typing still works.
        stopListening(
          `Listening stopped: ${error.message} Press Listen again in a minute; typing still works.`,
          "error",
        );
      } else {
        const code = error.code ? `${error.code}: ` : "";
        stopListening(`Listening stopped: ${code}${error.message}`, "error");
      }
      return;
    }
    if (generation !== speech.generation) return; // stopped, or another asked for: left to expire
    if (offer.sample_rate !== speech.rate) {
      speech.rate = offer.sample_rate;
      speech.mic?.setRate(offer.sample_rate);
      speech.backlog = []; // at the rate before
    }
    const stream = new TranscribeStream({
      url: offer.url,
      sampleRate: offer.sample_rate,
      onResult: (result) => {
        if (stream === speech.stream) turnTaking.result(result);
      },
      onError: (error) => streamFailed(stream, error),
      onClose: (close) => {
        if (stream === speech.stream && close.ended) turnTaking.streamEnded();
      },
    });
    speech.stream = stream;
    speech.stats.streams += 1;
    stream.open();
    for (const pcm of speech.backlog.splice(0)) stream.send(pcm);
    if (speech.releasing) stream.end();
  }

  /** The turn was taken (or cut): the next words go to a new session. */
  function nextSession() {
    const done = speech.stream;
    speech.stream = null;
    done?.end(); // Transcribe ends it; its last results are no longer ours
    openSession();
  }

  function streamFailed(stream, error) {
    if (stream !== speech.stream || !speech.mode) return;
    turnTaking.streamEnded();
    if (speech.releasing) return; // push-to-talk: what came decides the turn
    speech.failures += 1;
    const why = `${error.type}: ${error.message}`;
    if (error.type === "LimitExceededException") {
      // The account's concurrent Transcribe streams are all taken (25 by default): asking again
      // at once would take another place, so the page stops and says what the person can do.
      stopListening(
        "Listening stopped: too many people are speaking to this service at once " +
          `(${why}). Type your question, or press Listen again in a minute.`,
        "error",
      );
      return;
    }
    if (speech.failures > MAX_STREAM_FAILURES) {
      stopListening(
        `Listening stopped: Transcribe failed ${speech.failures} times in a row (${why}).` +
          blockedPortHint(stream, error),
        "error",
      );
      return;
    }
    note(`Transcribe: ${why}; listening again.`, "error");
    speech.stream = null;
    const generation = speech.generation;
    setTimeout(() => {
      if (speech.mode && generation === speech.generation) openSession();
    }, 250 * speech.failures);
  }

  /** Why a stream that never opened might not have: AWS's Transcribe listens on port 8443, which
   * some networks (offices, hotels) block while 443 works. */
  function blockedPortHint(stream, error) {
    if (!error.refused) return "";
    let port = "";
    try {
      port = new URL(stream.url).port;
    } catch {
      return "";
    }
    return port === "8443"
      ? " Transcribe is reached on port 8443: a network that blocks that port blocks speech in" +
          " (docs/deploy.md, \"Speech in\"); typing still works."
      : "";
  }

  /** What listening.js says happened. */
  function heardEvent(event) {
    const events = speech.stats.events;
    events.push({ at: Math.round(performance.now()), ...event });
    if (events.length > 500) events.splice(0, events.length - 500);
    switch (event.type) {
      case "state":
        if (event.state === "hearing" && speech.noteKind !== "error") note("");
        if (event.state === "idle" && speech.mode === "push") finishPush();
        return changed();
      case "heard":
        speech.line = event.text && !event.final ? { text: event.text, final: false } : null;
        return changed();
      case "hold":
        speech.stats.holds += 1;
        speech.stats.hold = { voiceAt: turnTaking.utterance.voiceAt, heldAt: performance.now() };
        if (agent.turn() && player.playing > 0) agent.hold(agent.turn());
        return undefined;
      case "resume":
        speech.stats.resumes += 1;
        if (speech.stats.hold) speech.stats.hold.resumedAt = performance.now();
        if (agent.turn()?.hold) agent.resume(agent.turn());
        return undefined;
      case "barge-in": {
        speech.stats.bargeIns += 1;
        const held = agent.turn()?.hold; // the agent went silent when the hold began
        // Silent now; the cancel says what was heard.
        if (agent.turn() && player.playing > 0) agent.stop();
        speech.stats.bargeIn = {
          reason: event.reason,
          voiceAt: turnTaking.utterance.voiceAt,
          stoppedAt: held ? held.at : performance.now(),
          held: Boolean(held),
        };
        return undefined;
      }
      case "turn":
        speech.stats.turns += 1;
        speech.failures = 0;
        if (speech.mode && !speech.releasing) nextSession();
        agent.ask(event.text);
        if (event.cut) {
          const seconds = Math.round(turnTaking.options.maxUtteranceMs / 1000);
          note(`You spoke for ${seconds} s: what you said so far was asked.`, "cut");
        }
        return undefined;
      case "missed":
        note(
          event.why === "no-voice"
            ? "Didn't catch that: nothing was heard (hold Space while you speak)."
            : "Didn't catch that: say it again?",
          "missed",
        );
        return undefined;
      default:
        return undefined; // ignored: echo, noise, a backchannel
    }
  }

  /** Push-to-talk's turn is decided (and, from stopListening, any listening): the microphone, the
   * Transcribe stream and the timers stop. */
  function finishPush() {
    speech.mode = null;
    speech.releasing = false;
    speech.generation += 1; // a listen still unanswered opens nothing
    clearInterval(speech.timer);
    speech.mic?.stop();
    speech.mic = null;
    speech.stream?.close();
    speech.stream = null;
    speech.backlog = [];
    speech.line = null;
    speech.context?.suspend(); // no audio thread while nobody listens; resumed in the next gesture
  }

  function renderMicrophone(open) {
    const button = $("mic");
    button.disabled = !open || Boolean(speech.unavailable);
    button.title = speech.unavailable;
    button.setAttribute("aria-pressed", String(speech.mode === "open"));
    button.dataset.listening = speech.mode || "";
    const state = speech.mode ? turnTaking.state : "idle";
    const words = LISTEN_STATES[state] || state;
    const noted = state === "idle" ? speech.note : `${words}: ${speech.note}`;
    const text = speech.note ? noted : words;
    const status = $("mic-status");
    if (status.textContent !== text) status.textContent = text;
    // Written only when they change: each write is a mutation, which observers see.
    if (status.dataset.phase !== state) status.dataset.phase = state;
    if (status.dataset.note !== speech.noteKind) status.dataset.note = speech.noteKind;
    if (!speech.mode) $("mic-level").value = 0;
  }

  /** Space is the push-to-talk key except where it types or presses something itself. */
  function takesSpace(element) {
    if (!element || element === document.body || element === document.documentElement) return false;
    if (element.isContentEditable) return true;
    const controls = "input, textarea, select, button, a[href], summary, [role=button]";
    return Boolean(element.closest(controls));
  }

  /** The microphone's controls: Listen, and Space held (push-to-talk). */
  function wire() {
    $("mic").addEventListener("click", () => {
      if (speech.mode === "open") stopListening();
      else if (!speech.mode) startListening("open");
    });
    // Push-to-talk: Space held (not while typing, nor on a control Space presses).
    document.addEventListener("keydown", (event) => {
      if (event.code !== "Space" || event.ctrlKey || event.altKey || event.metaKey) return;
      if (takesSpace(event.target)) return;
      if (speech.mode === "push") {
        event.preventDefault(); // held: no page scroll
      } else if (!speech.mode && !event.repeat && !$("mic").disabled) {
        event.preventDefault();
        startListening("push");
      }
    });
    document.addEventListener("keyup", (event) => {
      if (event.code === "Space" && speech.mode === "push") {
        event.preventDefault();
        releasePush();
      }
    });
    window.addEventListener("blur", releasePush); // a key released elsewhere is never seen here
  }

  return {
    speech,
    echoGate,
    turnTaking,
    offered,
    listenRefused,
    rejectOffers,
    stopListening,
    renderMicrophone,
    wire,
  };
}
