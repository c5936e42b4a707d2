/**
 * Busy-polling the event loop while one answer from another thread or process is due.
 *
 * Every engine answer reaches this thread by waking it: isolated-vm's async `apply` settles
 * through a libuv async handle, a QuickJS thread answers over a MessagePort, a worker process
 * over a pipe. A sleeping thread wakes in ~35 µs on this machine (a shared 2-core VM), and a
 * round trip pays that at least once, which is most of a warm call. A loop that keeps turning
 * — a ref'd `setImmediate` chain, so every turn polls I/O with a zero timeout — sees the answer
 * on its next turn instead. Measured here (p50 round trip): isolated-vm `apply` 91–100 → 25–31
 * µs, a MessagePort ping 81 → 7 µs, a pipe between two Node processes 69 → 21 µs.
 *
 * Nothing blocks: timers, I/O and other work run between turns as usual. The price is CPU, so
 * the loop turns only
 * - while exactly one answer is due and no background work (a spare instance in the making) is
 *   under way: with more, the threads computing them need the cores, and a spinning thread
 *   takes one (measured: raw `apply` with 64 in flight, 100–130k/s sleeping vs 70–90k/s
 *   spinning; a paced one-off run overlapping a spare's creation, 0.65 ms vs 1.75 ms);
 * - for at most `ms` after the latest request, so a long guest run costs one window, not its length;
 * - only in a stream: when the previous answer arrived within `ms`. After a pause the thread that
 *   computes the answer has gone to sleep, and the kernel may wake it on the core this loop
 *   spins on, where it waits until the window ends (measured with raw isolated-vm: after 10 ms
 *   idle, a call's answer took the whole window in half the trials; a paced one-off run went
 *   from 0.65 to 1.75 ms with a 1 ms window). Back-to-back calls keep their threads awake.
 * docs/decisions/009-busy-poll.md records the measurements and the trade-off.
 */
let due = 0;
/** Of them, answers from another process (a pipe): not waited for while a serving task spins. */
let dueFromProcess = 0;
let background = 0;
/** Tasks spinning on other threads of this process while they wait (v8's shared-memory calls). */
let spinners = 0;
let until = 0;
/** When the latest answer arrived: polling starts only in a stream of them. */
let lastSettled = Number.NEGATIVE_INFINITY;
let turning = false;
/**
 * While exactly one answer is due: whether its sender has begun on it (a QuickJS worker entered
 * the crossing), when the sender can tell; and when it was asked for.
 */
let begun: (() => boolean) | undefined;
let askedAt = 0;
/** Polling is paused until then: a window ended before the sender had even begun (judged). */
let pausedUntil = 0;
let pauseMs = 0;
const FIRST_PAUSE_MS = 10;
const LONGEST_PAUSE_MS = 8000;

/**
 * One answer due, nothing in the background, and, when that answer comes from another process, no
 * task spinning here: the process computing it would get no core (measured: a process host call
 * interleaved with in-process calls whose serving task kept spinning, p50 0.1 -> 1.2 ms).
 */
function worthTurning(): boolean {
  return due === 1 && background === 0 && (dueFromProcess === 0 || spinners === 0) && !pollingPaused();
}

/**
 * Is polling paused? A whole window passed and the thread that computes the answer had not even
 * begun: this loop's spinning held the core it needed (a busy machine: other processes take the
 * rest). Measured, QuickJS calls back to back at load ~7 on 2 cores: p50 1.1 ms polled, 0.11–0.13
 * ms not. A slow call (a collection, a cold function) is not taken for a lost core: it had begun.
 * A lost window costs about the window (1 ms); a polled answer saves 50–70 µs over an unpolled
 * one. So polling pauses when more than 1 in 16 of the recent windows were lost (an average over
 * ~64), for 10 ms; when the windows after a pause are lost again (the next pause comes within 8
 * windows, or a quarter of them or more were lost), it is twice as long (20 ms, ... 8 s), else 10
 * ms again. Measured:
 * on a quiet machine a few windows in 3,000 are lost, in bursts (this process's own spinning threads
 * fill both cores while a collector or another process wants one); beside one spinning process,
 * 5–15% were lost, scattered, which three-in-a-row never caught (p90 1.08 ms); one core shared with
 * a spinner loses nearly all. A first pause of 1 s cost the calls after a quiet-machine burst 20–40
 * µs of p50, one of 50 ms still cost v8 the first 8,000 calls' polling (p50 41–43 against 12–17 µs:
 * paused, a v8 call is not served). docs/decisions/009-busy-poll.md has the figures.
 */
export function pollingPaused(): boolean {
  return pausesAllowed && pausedUntil !== 0 && performance.now() < pausedUntil;
}

let pausesAllowed = true;

/**
 * Tests of what polling makes possible (v8's shared-memory calls) turn pauses off: on a loaded
 * test machine they would otherwise take the path under test away. Not part of the public API.
 */
export function allowPollingPauses(allowed: boolean): void {
  pausesAllowed = allowed;
}

let lostCoreCount = 0;

/** How many windows ended before their sender had begun, in this process (tests, benches). */
export function lostCores(): number {
  return lostCoreCount;
}

/** The share of recent judged windows that were lost (an average over about 64 of them). */
let lostShare = 0;
const LOST_SHARE_TO_PAUSE = 1 / 16;
/** Past this share of windows lost, polling pauses however much an answer it speeds up saves. */
const MOST_LOST_SHARE_TO_PAUSE = 1 / 2;
/** A paused round trip older than this no longer says what polling saves now. */
const PAUSED_SAMPLE_TTL_MS = 10_000;

/**
 * Typical round trips (µs) of an answer due alone and back within a window's length: polled,
 * and asked while polling was paused. Their difference is what polling saves an answer on this
 * machine now (answers that take longer, long guest runs, count on neither side).
 */
let polledUs = Number.NaN;
let pausedUs = Number.NaN;
let pausedSampledAt = Number.NEGATIVE_INFINITY;
/** The window of the latest request (what a lost window costs). */
let windowMs = 1;

function averaged(mean: number, sample: number): number {
  return Number.isNaN(mean) ? sample : mean + (sample - mean) / 16;
}

/**
 * The share of lost windows past which polling pauses: where the windows it loses (each costs
 * about the window: the sender waited it out) cost more than the answers it speeds up save. 1 in
 * 16 when an answer saves 50–70 µs (decision 009's figures, and the rule until a pause has
 * measured otherwise); more when wake-ups are dearer. Measured on a KVM guest with halt polling
 * off: a thread's wake-up cost 150–200 µs at times, a QuickJS call back to back then took ~470 µs
 * paused or unpolled and ~60 µs polled, so polling paid up to ~40% of windows lost, and pausing at
 * 1 in 16 made calls 8× slower for as long as the pause lasted (up to 8 s).
 */
export function lostShareToPause(polledRoundTripUs: number, pausedRoundTripUs: number, windowOfMs: number): number {
  const saved = pausedRoundTripUs - polledRoundTripUs;
  if (!(saved > 0) || !(windowOfMs > 0)) return LOST_SHARE_TO_PAUSE;
  return Math.min(MOST_LOST_SHARE_TO_PAUSE, Math.max(LOST_SHARE_TO_PAUSE, saved / (windowOfMs * 1000)));
}

/**
 * The paused round trip's average, or NaN when its latest sample is too old to speak for now: a
 * stale average would keep polling on the word of a machine that has changed since.
 */
function freshPausedUs(now: number): number {
  return now - pausedSampledAt <= PAUSED_SAMPLE_TTL_MS ? pausedUs : Number.NaN;
}

/** A paused answer's round trip (µs), `now` the time it settled. */
function sampledPaused(roundTripUs: number, now: number): void {
  pausedUs = averaged(freshPausedUs(now), roundTripUs);
  pausedSampledAt = now;
}

/** Windows judged since the last pause ended, and how many of them were lost. */
let judgedSincePause = 0;
let lostSincePause = 0;

function judged(lost: boolean, now: number): void {
  judgedSincePause++;
  lostShare += ((lost ? 1 : 0) - lostShare) / 64;
  if (!lost) return;
  lostCoreCount++;
  lostSincePause++;
  if (lostShare <= lostShareToPause(polledUs, freshPausedUs(now), windowMs)) return;
  // Back under the threshold, but close: three more lost windows in a row pause again.
  lostShare = LOST_SHARE_TO_PAUSE / 2;
  // Still losing since the last pause (within 8 windows, or a quarter of them or more): the core
  // is still taken, pause longer. Otherwise a new burst: 10 ms.
  const still = pauseMs !== 0 && (judgedSincePause <= 8 || lostSincePause * 4 >= judgedSincePause);
  pauseMs = still ? Math.min(pauseMs * 2, LONGEST_PAUSE_MS) : FIRST_PAUSE_MS;
  pausedUntil = now + pauseMs;
  judgedSincePause = 0;
  lostSincePause = 0;
}

function turn(): void {
  if (!worthTurning()) {
    turning = false;
    return;
  }
  const now = performance.now();
  if (now < until) {
    setImmediate(turn);
    return;
  }
  turning = false;
  // Judged only when the window that ended was opened for this answer (`until` set when asked).
  if (begun !== undefined && until > askedAt && !begun()) judged(true, now);
}

function start(): void {
  if (!turning && worthTurning()) {
    turning = true;
    setImmediate(turn);
  }
}

/**
 * `answer` is due from another thread or process: keep this thread's loop turning for up to
 * `ms` until it settles (0: never). Returns `answer`.
 */
export function pollUntilSettled<T>(answer: Promise<T>, ms: number, fromProcess = false, started?: () => boolean): Promise<T> {
  if (!(ms > 0)) return answer;
  due++;
  if (fromProcess) dueFromProcess++;
  const now = performance.now();
  // `started` is judged only for a window opened for this answer alone.
  begun = due === 1 ? started : undefined;
  askedAt = now;
  windowMs = ms;
  if (now - lastSettled <= ms) until = now + ms;
  const judgedHere = begun !== undefined && until > now;
  // Alone, of a kind that is judged, and not polled for: what an answer costs while paused.
  const pausedHere = begun !== undefined && pollingPaused();
  start();
  const settled = () => {
    due--;
    if (fromProcess) dueFromProcess--;
    lastSettled = performance.now();
    const roundTripUs = (lastSettled - now) * 1000;
    // Answered in a window opened for it alone: a window not lost.
    if (judgedHere && turning) {
      judged(false, lastSettled);
      polledUs = averaged(polledUs, roundTripUs);
    } else if (pausedHere && roundTripUs < ms * 1000) sampledPaused(roundTripUs, lastSettled);
    begun = undefined;
    start();
  };
  answer.then(settled, settled);
  return answer;
}

/**
 * Would an answer due from another process now be polled for (`pollUntilSettled(answer, ms,
 * true)`)? Its sender tells the other side, which may then turn too (pollForRequests).
 */
export function wouldPollProcess(ms: number): boolean {
  return ms > 0 && due === 0 && background === 0 && spinners === 0 && performance.now() - lastSettled <= ms;
}

/** `task` spins on another thread of this process until it settles (a v8 serving task). */
export function spinsUntilSettled(task: Promise<unknown>): void {
  spinners++;
  const settled = () => {
    spinners--;
    start();
  };
  task.then(settled, settled);
}

/**
 * An answer another thread writes to shared memory: `read` is asked on every turn of the loop
 * for up to `ms` (the loop keeps turning meanwhile), then every millisecond, until it returns a
 * value or throws.
 */
export function pollMemory<T>(read: () => T | undefined, ms: number, begun?: () => boolean): Promise<T> {
  due++;
  windowMs = ms;
  // Judged as pollUntilSettled's windows are (a task that spins waiting for requests takes one within µs if it has a core).
  let judging = begun !== undefined && due === 1;
  return new Promise<T>((resolve, reject) => {
    const started = performance.now();
    const check = () => {
      let value: T | undefined;
      try {
        value = read();
      } catch (error) {
        due--;
        reject(error);
        return;
      }
      const now = performance.now();
      if (value !== undefined) {
        due--;
        lastSettled = now;
        if (judging && now - started < ms) {
          judged(false, now);
          polledUs = averaged(polledUs, (now - started) * 1000);
        }
        resolve(value);
      } else if (now - started < ms) setImmediate(check);
      else {
        if (judging && begun?.() === false) judged(true, now);
        judging = false;
        setTimeout(check, 1);
      }
    };
    setImmediate(check);
  });
}

/**
 * Nothing else is due from another thread and nothing runs in the background: a new request
 * would be the only one, the case where spinning for it pays (with more, the threads computing
 * them need the cores: measured, v8 events one per call with 64 in flight, 47-65k/s without
 * shared-memory calls, 38-58k/s with them taken regardless).
 */
export function alone(): boolean {
  return due === 0 && background === 0;
}

/** Work on other threads nobody is waiting for yet (a spare instance): no polling meanwhile. */
export function inBackground<T>(work: Promise<T>): Promise<T> {
  background++;
  const settled = () => {
    background--;
    start();
  };
  work.then(settled, settled);
  return work;
}

/** The window cordon uses unless a sandbox says otherwise (`busyPollMs`). */
export const DEFAULT_BUSY_POLL_MS = 1;

/**
 * The other side of a round trip: a process worker's loop, between the requests it serves. After
 * answering a request whose sender polls for the answer (`wouldPollProcess` there), the loop keeps
 * turning until `ms` after that request, whenever `idle()` says nothing of its own is in progress,
 * so the next request is read at once instead of after a wake-up (the QuickJS threads do the same
 * in their worker.ts). Not while a request is in progress: the engine thread computing it needs
 * the core. Call `heard(polled)` on each request and `answered()` after each answer.
 */
export function pollForRequests(ms: number, idle: () => boolean): { heard(polled: boolean | undefined): void; answered(): void } {
  let until = 0;
  let turning = false;
  const turn = () => {
    if (performance.now() < until && idle()) setImmediate(turn);
    else turning = false;
  };
  return {
    heard(polled) {
      if (polled && ms > 0) until = performance.now() + ms;
    },
    answered() {
      if (!turning && performance.now() < until && idle()) {
        turning = true;
        setImmediate(turn);
      }
    },
  };
}
