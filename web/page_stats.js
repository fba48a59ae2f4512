// What the page did, read-only, for tests, benches (`voicewire bench bargein`) and the curious:
// `window.voicewireStats` (the player, the turn shown and what of it was heard) and
// `window.voicewireListening` (speech in: listening.js's state, what it said, counts). Nothing
// on the page reads them; app.js publishes them once, over getters of its own state.

/**
 * Publish both views. `page`: current(), lastTurnNumber(), framesDropped(), shown() and
 * heardMs(turn) of app.js; `player`; `listening`: the page's speechIn.
 */
export function publishPageStats({ page, player, listening }) {
  Object.defineProperty(window, "voicewireStats", {
    value: Object.freeze({
      get framesDecoded() {
        return player.framesDecoded;
      },
      get secondsScheduled() {
        return player.secondsScheduled;
      },
      get turn() {
        return page.current() ? page.current().number : page.lastTurnNumber();
      },
      get framesDropped() {
        return page.framesDropped();
      },
      get playing() {
        return player.playing;
      },
      // The turn shown: when its audio is heard, on the page's clock ([from, to] ms spans; a gap
      // between two: its audio came late and ran out).
      get playback() {
        const shown = page.shown();
        if (!shown) return [];
        return shown.playback.map(([from, to]) => [from + shown.clickAt, to + shown.clickAt]);
      },
      // The turn shown: ms of its audio heard (live while it plays, frozen at a cut), the index
      // of the word being heard (-1: none), and its word timings ({text, start, end}, in ms of
      // its audio, from the words frames).
      get heardMs() {
        return page.shown() ? Math.max(0, page.heardMs(page.shown())) : null;
      },
      get word() {
        const shown = page.shown();
        return shown ? shown.follower.wordAt(page.heardMs(shown)) : -1;
      },
      get words() {
        const shown = page.shown();
        return shown ? shown.follower.words.map((word) => ({ ...word })) : [];
      },
    }),
  });

  // Speech in, read-only, for tests and the curious: listening.js's state and what it said
  // (events: {at, type, ...}), and how much went where.
  Object.defineProperty(window, "voicewireListening", {
    value: Object.freeze({
      get mode() {
        return listening.speech.mode;
      },
      get state() {
        return listening.turnTaking.state;
      },
      get options() {
        return { ...listening.turnTaking.options };
      },
      get stats() {
        const { events, ...counts } = listening.speech.stats;
        return {
          ...counts,
          bargeIn: counts.bargeIn && { ...counts.bargeIn },
          events: events.map((event) => ({ ...event })),
          audioEvents: listening.speech.stream ? listening.speech.stream.eventsSent : 0,
        };
      },
    }),
  });
}
