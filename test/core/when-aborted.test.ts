import { describe, expect, it } from "vitest";
import { whenAborted } from "../../src/core/when-aborted.js";

describe("whenAborted", () => {
  it("calls once, for the first of its signals to abort, at once for one already aborted, never after detach", () => {
    const [a, b] = [new AbortController(), new AbortController()];
    let calls = 0;
    whenAborted([a.signal, undefined, b.signal], () => calls++);
    b.abort();
    a.abort();
    expect(calls).toBe(1);

    let early = 0;
    whenAborted([AbortSignal.abort()], () => early++);
    expect(early).toBe(1);

    const c = new AbortController();
    let late = 0;
    const detach = whenAborted([c.signal], () => late++);
    detach();
    c.abort();
    expect(late).toBe(0);
  });
});
