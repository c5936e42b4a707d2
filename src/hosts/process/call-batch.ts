import type { HostRequest } from "../../core/protocol.js";
import { joinTexts, splitTexts } from "../../core/joined-texts.js";
import { FLUSH_AT_CHARS, MAX_BATCHED_TEXT_CHARS } from "./batched-texts.js";

export type CallMessage = Extract<HostRequest, { t: "prefix-call" }>;
type CallsMessage = Extract<HostRequest, { t: "prefix-calls" }>;
/** A "prefix-calls" request without its joined arguments, which travel as texts (writeJoined). */
export type CallsHeader = Omit<CallsMessage, "argsText">;

/**
 * From this many characters of arguments a frame's calls are written into it one by one
 * (framing.ts, encodeJoinedTextFrame) rather than joined first. Below it, one join and one write
 * cost less than a write per text (64 calls of 12 characters: 5-7.5 against 9 µs to frame them);
 * above it, the join's copy costs more (64 of 200: 41 against 26 µs; 64 of 777: 155 against
 * 48-83; 4 of 25 KB: 470-530 against 230-300, its string in fresh pages).
 */
const WRITE_TEXTS_FROM_CHARS = 16 * 1024;

/**
 * The sandbox's calls to one worker made in one tick, written as ONE "prefix-calls" frame
 * (protocol.ts) per run of calls to the same prefix and export. Under load a crossing's answers
 * each make the next call in the same tick; a frame each cost the host's thread 12% of its time
 * (v8 events one per call, 64 in flight) and the worker's reading them 9% of its own.
 *
 * Only plain calls wait: no limits riding on them, no abort signal, no poll hint. `write` frames
 * and writes one request; every other request goes after `flush()`, so order holds.
 */
export class CallBatch {
  private ids: number[] = [];
  private texts: string[] = [];
  private prefix = 0;
  private path = "";
  private chars = 0;
  private scheduled = false;

  constructor(
    private readonly write: (message: HostRequest) => void,
    /** Writes a "prefix-calls" request whose arguments are `texts`, joined (their frame's text). */
    private readonly writeJoined: (header: CallsHeader, texts: string[]) => void = (header, texts) =>
      write({ ...header, argsText: joinTexts(texts) }),
  ) {}

  static takes(message: HostRequest): boolean {
    return (
      message.t === "prefix-call" &&
      message.limits === undefined &&
      message.abortable !== true &&
      message.poll !== true &&
      message.argsText.length <= MAX_BATCHED_TEXT_CHARS
    );
  }

  add(message: CallMessage): void {
    if (this.ids.length > 0 && (message.prefix !== this.prefix || message.path !== this.path)) this.flush();
    this.prefix = message.prefix;
    this.path = message.path;
    this.ids.push(message.id);
    this.texts.push(message.argsText);
    this.chars += message.argsText.length;
    if (this.chars >= FLUSH_AT_CHARS) this.flush();
    else if (!this.scheduled) {
      this.scheduled = true;
      // After this tick's promise reactions: the calls they make join this frame.
      process.nextTick(() => {
        this.scheduled = false;
        this.flush();
      });
    }
  }

  /** Write what is batched: one call as the "prefix-call" frame it was, more as one "prefix-calls" frame. */
  flush(): void {
    const count = this.ids.length;
    if (count === 0) return;
    const { ids, texts, prefix, path, chars } = this;
    this.ids = [];
    this.texts = [];
    this.chars = 0;
    if (count === 1) this.write({ t: "prefix-call", id: ids[0], prefix, path, argsText: texts[0] });
    else if (chars >= WRITE_TEXTS_FROM_CHARS) this.writeJoined({ t: "prefix-calls", ids, prefix, path }, texts);
    else this.write({ t: "prefix-calls", ids, prefix, path, argsText: joinTexts(texts) });
  }
}

/** A "prefix-calls" request's parts as the "prefix-call" requests they stand for; undefined when malformed. */
export function callsOfRequest(message: CallsMessage): CallMessage[] | undefined {
  const { ids, prefix, path, argsText } = message;
  if (!Array.isArray(ids) || ids.length < 2 || typeof argsText !== "string") return undefined;
  if (!ids.every((id) => Number.isSafeInteger(id))) return undefined;
  const texts = splitTexts(argsText, ids.length);
  return texts?.map((text, i) => ({ t: "prefix-call", id: ids[i], prefix, path, argsText: text }));
}
