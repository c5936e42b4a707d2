import { describe, expect, it } from "vitest";
import { Residency, type Resident } from "../../src/core/residency.js";

function resident(name: string, heap: number, idleSince: number, evicted: string[]): Resident & { heap: number } {
  const r = {
    prefixKey: name,
    heap,
    heapBytes: () => r.heap,
    idleSince: () => idleSince,
    evict: () => void evicted.push(name),
  };
  return r;
}

describe("Residency", () => {
  it("keeps idle instances within the budget, evicting by heap × idle time", () => {
    const evicted: string[] = [];
    const now = performance.now();
    const budget = new Residency(100);
    expect(budget.admit(resident("old-small", 30, now - 10_000, evicted))).toBe(true);
    expect(budget.admit(resident("new-big", 50, now - 10, evicted))).toBe(true);
    expect(budget.idleBytes).toBe(80);
    // 40 more: 20 must go; old-small scores 30 × 10 s, new-big 50 × 10 ms.
    expect(budget.admit(resident("next", 40, now, evicted))).toBe(true);
    expect(evicted).toEqual(["old-small"]);
    expect(budget.idleBytes).toBe(90);
    expect(budget.idleCount).toBe(2);
  });

  it("sheds one idle instance at a time, highest heap × idle time first, and nothing when none is idle", () => {
    const evicted: string[] = [];
    const now = performance.now();
    const budget = new Residency(1000);
    budget.admit(resident("old-small", 30, now - 10_000, evicted));
    budget.admit(resident("new-big", 50, now - 10, evicted));
    expect(budget.shedOne()).toBe(30);
    expect(evicted).toEqual(["old-small"]);
    expect(budget.idleBytes).toBe(50);
    expect(budget.shedOne()).toBe(50);
    expect(budget.shedOne()).toBe(0);
    expect(evicted).toEqual(["old-small", "new-big"]);
    expect(budget.idleCount).toBe(0);
  });

  it("refuses an instance larger than the whole budget, evicting nothing", () => {
    const evicted: string[] = [];
    const budget = new Residency(100);
    budget.admit(resident("a", 60, performance.now(), evicted));
    expect(budget.admit(resident("huge", 101, performance.now(), evicted))).toBe(false);
    expect(evicted).toEqual([]);
    expect(budget.idleBytes).toBe(60);
  });

  it("leave subtracts what was counted; leaving twice is harmless", () => {
    const budget = new Residency(100);
    const a = resident("a", 60, performance.now(), []);
    budget.admit(a);
    a.heap = 90; // re-measured while idle: counted at admission until a recount
    budget.leave(a);
    budget.leave(a);
    expect(budget.idleBytes).toBe(0);
    expect(budget.idleCount).toBe(0);
  });

  it("recount counts one re-measured heap: evicts others until it fits, or it alone past the budget", () => {
    const evicted: string[] = [];
    const now = performance.now();
    const budget = new Residency(100);
    const a = resident("a", 40, now - 5000, evicted);
    const b = resident("b", 40, now, evicted);
    budget.admit(a);
    budget.admit(b);
    b.heap = 70;
    budget.recount(b);
    expect(evicted).toEqual(["a"]);
    expect(budget.idleBytes).toBe(70);
    b.heap = 120;
    budget.recount(b);
    expect(evicted).toEqual(["a", "b"]);
    expect(budget.idleBytes).toBe(0);
    budget.recount(b); // no longer idle: nothing to count
    expect(budget.idleCount).toBe(0);
  });
});
