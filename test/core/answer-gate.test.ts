import { describe, expect, it } from "vitest";
import { AnswerGate } from "../../src/core/answer-gate.js";

/** Has `promise` settled by the end of this turn's microtasks? */
async function settled(promise: Promise<unknown> | undefined): Promise<boolean> {
  if (!promise) return true;
  let done = false;
  void promise.then(() => {
    done = true;
  });
  await new Promise((resolve) => setImmediate(resolve));
  return done;
}

describe("AnswerGate (the conformance suite runs it on every engine and host: answers-in-flight)", () => {
  it("lets the first answer pass whatever the cap, then waits while the cap is held, until a release", async () => {
    const gate = new AnswerGate(10);
    expect(gate.turn()).toBeUndefined();
    gate.hold(25);
    const waiting = gate.turn();
    expect(await settled(waiting)).toBe(false);
    gate.release(20);
    expect(await settled(waiting)).toBe(true);
    expect(gate.heldChars).toBe(5);
    expect(gate.turn()).toBeUndefined();
  });

  it("wakes a waiter whose call is aborted", async () => {
    const gate = new AnswerGate(10);
    gate.hold(10);
    const stop = new AbortController();
    const waiting = gate.turn(stop.signal);
    expect(await settled(waiting)).toBe(false);
    stop.abort();
    expect(await settled(waiting)).toBe(true);
  });

  it("past the cap, the oldest body being read reads on and the others wait for it, so half-read bodies never stall each other", async () => {
    const gate = new AnswerGate(100);
    const first = gate.reading();
    const second = gate.reading();
    expect(first.chunk(60)).toBeUndefined();
    expect(second.chunk(30)).toBeUndefined();
    // 90 held: under the cap. Now both take 20 more: 130.
    const secondWaits = second.chunk(20);
    expect(first.chunk(20)).toBeUndefined(); // the oldest reads on
    expect(await settled(secondWaits)).toBe(false);
    // The first is read: its answer may be encoded (it is the oldest), then holds its text.
    expect(first.encodable()).toBeUndefined();
    gate.hold(80);
    first.end();
    // Its answer (80) and the second body (50) are held: the second is the oldest now, and the
    // answers alone are under the cap: it reads on.
    expect(await settled(secondWaits)).toBe(true);
    expect(gate.heldChars).toBe(130);
  });

  it("a body whose chunks were all empty takes no place in line", async () => {
    const gate = new AnswerGate(100);
    const empty = gate.reading();
    expect(empty.chunk(0)).toBeUndefined();
    const a = gate.reading();
    const b = gate.reading();
    expect(a.chunk(80)).toBeUndefined();
    const bWaits = b.chunk(40);
    // 120 held, all of it bodies: `a` is the oldest and reads on, `b` waits; with the empty body
    // in line first, neither could have read on, ever.
    expect(a.chunk(10)).toBeUndefined();
    expect(await settled(bWaits)).toBe(false);
    empty.end();
    a.end();
    expect(await settled(bWaits)).toBe(true);
  });

  it("a body waits while the answers on their way alone fill the cap, even the oldest", async () => {
    const gate = new AnswerGate(100);
    gate.hold(100);
    const body = gate.reading();
    const waits = body.chunk(10);
    expect(await settled(waits)).toBe(false);
    gate.release(100);
    expect(await settled(waits)).toBe(true);
  });
});
