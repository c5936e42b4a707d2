import type { HostEvent } from "../../core/protocol.js";
import { joinTexts } from "../../core/joined-texts.js";
import { FLUSH_AT_CHARS, MAX_BATCHED_TEXT_CHARS } from "./batched-texts.js";

type ValueEvent = Extract<HostEvent, { t: "value" }>;

/**
 * A worker's "value" answers of one tick, written as ONE "values" frame (protocol.ts). A crossing
 * that served 32 coalesced calls answers all of them in the same tick, and a frame each cost the
 * worker's thread 14% of its time (v8 events one per call, 64 in flight: header JSON, a buffer, a
 * UTF-8 write per frame) and the host's reading them 9% of its own.
 *
 * `write` frames and writes one event in a lane. Everything else the worker sends goes after `flush()`, so
 * the host reads answers and other events in the order they were made.
 */
export class ValueBatch {
  private ids: number[] = [];
  private runs: number[] = [];
  private texts: string[] = [];
  private chars = 0;
  /** The lane of the answers batched (pipe-out.ts): one frame holds one lane's. */
  private lane = 0;

  constructor(private readonly write: (event: HostEvent, lane: number) => void) {}

  /** Whether `event` may wait for the end of the tick in a batch: a short value with no stats riding on it. */
  static takes(event: HostEvent): event is ValueEvent {
    return event.t === "value" && event.stats === undefined && event.valueText.length <= MAX_BATCHED_TEXT_CHARS;
  }

  add(event: ValueEvent, lane: number): void {
    if (this.ids.length > 0 && lane !== this.lane) this.flush();
    this.lane = lane;
    this.ids.push(event.id);
    for (const n of event.run) this.runs.push(n);
    this.texts.push(event.valueText);
    this.chars += event.valueText.length;
    if (this.chars >= FLUSH_AT_CHARS) this.flush();
  }

  /** Write what is batched: one value as the "value" frame it was, more as one "values" frame. */
  flush(): void {
    const count = this.ids.length;
    if (count === 0) return;
    const { ids, runs, texts } = this;
    this.ids = [];
    this.runs = [];
    this.texts = [];
    this.chars = 0;
    if (count === 1) this.write({ t: "value", id: ids[0], valueText: texts[0], run: runs }, this.lane);
    else this.write({ t: "values", ids, runs, valueText: joinTexts(texts) }, this.lane);
  }
}
