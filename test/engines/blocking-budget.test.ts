import { describe, expect, it } from "vitest";
import { BlockingBudget, MAX_BLOCK_MS } from "../../src/engines/blocking-budget.js";

describe("how long a prefix's calls may block a shared thread", () => {
  it("only calls under a short CPU limit may block", () => {
    const budget = new BlockingBudget();
    expect(budget.allows(MAX_BLOCK_MS)).toBe(true);
    expect(budget.allows(MAX_BLOCK_MS + 1)).toBe(false);
    expect(budget.allows(5000)).toBe(false);
  });

  it("a guest that spins after quick calls gets one or two whole limits, then blocks nothing until it has paid back", () => {
    const budget = new BlockingBudget();
    budget.spend(MAX_BLOCK_MS); // a crossing its limit ended
    expect(budget.allows(MAX_BLOCK_MS)).toBe(true);
    budget.spend(MAX_BLOCK_MS);
    expect(budget.allows(MAX_BLOCK_MS)).toBe(false);
    // Repaid at 50 ms a second: nothing worth a whole limit comes back within a test's milliseconds.
    expect(budget.allows(10)).toBe(false);
  });

  it("a quick export's occasional slow reading costs little", () => {
    const budget = new BlockingBudget();
    // 150 readings 0.4 ms past the allowance (a collection now and then): 60 ms of debt.
    for (let i = 0; i < 150; i++) budget.spend(0.4);
    expect(budget.allows(MAX_BLOCK_MS)).toBe(true);
    budget.spend(-5); // a quick crossing repays nothing by itself
    budget.spend(0);
    expect(budget.allows(MAX_BLOCK_MS)).toBe(true);
  });

  it("debt is repaid over time", async () => {
    const budget = new BlockingBudget();
    budget.spend(200);
    expect(budget.allows(5)).toBe(false);
    // 50 ms a second: 200 ms later, 10 ms is repaid.
    await new Promise((resolve) => setTimeout(resolve, 250));
    expect(budget.allows(5)).toBe(true);
    expect(budget.allows(MAX_BLOCK_MS)).toBe(false);
  });
});
