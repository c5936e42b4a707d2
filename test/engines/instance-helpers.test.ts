import { describe, expect, it } from "vitest";
import { joinTexts } from "../../src/core/joined-texts.js";
import { type RuntimeCaps, renameThrownOutcomes, sameCaps } from "../../src/engines/instance.js";

describe("the helpers every engine instance shares", () => {
  it("sameCaps: a call's caps match its instance's previous ones only when all four do", () => {
    const caps: RuntimeCaps = [1000, 100, 65536, 4096];
    expect(sameCaps(undefined, caps)).toBe(false);
    expect(sameCaps([1000, 100, 65536, 4096], caps)).toBe(true);
    for (let i = 0; i < 4; i++) {
      const other = [...caps] as RuntimeCaps;
      other[i] += 1;
      expect(sameCaps(other, caps)).toBe(false);
    }
  });

  it("renameThrownOutcomes renames only thrown outcomes, keeps values exactly and the outcomes' order", () => {
    // Values ("v…") and pending ones ("p") may contain anything, the thrown text's name included.
    const joined = joinTexts(['v"at 7\u2063guest.js"', "tError: x\n    at 7\u2063guest.js:1:2", "p", "tplain"]);
    const renamed = renameThrownOutcomes(joined, (thrown) => thrown.replace("7\u2063", ""));
    expect(renamed).toBe(joinTexts(['v"at 7\u2063guest.js"', "tError: x\n    at guest.js:1:2", "p", "tplain"]));
    expect(renameThrownOutcomes("v1", () => "changed")).toBe("v1");
  });
});
