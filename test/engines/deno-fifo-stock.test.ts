import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { findMkfifo, placeFifos } from "../../src/engines/deno/fifos.js";

/**
 * Each Deno process needs two FIFOs, and Node cannot make one: the mkfifo command does. Every
 * spawn blocks the host's event loop while libuv forks the host, so FIFOs are made ahead, 16 at
 * a time, and moved into place. (A fresh module here: the stock starts empty.)
 */
describe("deno: FIFOs made ahead", () => {
  const work = mkdtempSync(join(tmpdir(), "cordon-fifo-stock-"));
  afterAll(() => rmSync(work, { recursive: true, force: true }));
  // A mkfifo that logs each call, then does the real work.
  const log = join(work, "calls.log");
  const mkfifo = join(work, "mkfifo");
  writeFileSync(mkfifo, `#!/bin/sh\necho "$@" >> ${log}\nexec ${findMkfifo()} "$@"\n`);
  chmodSync(mkfifo, 0o700);
  const calls = () => readFileSync(log, "utf8").trim().split("\n").length;

  it("eight processes' FIFOs cost one mkfifo call; each is a FIFO of this user only, in place", async () => {
    const stockDir = join(work, "stock");
    rmSync(stockDir, { recursive: true, force: true });
    mkdirSync(stockDir, { mode: 0o700 });
    const targets = Array.from({ length: 8 }, (_, i) => [join(work, `in-${i}`), join(work, `out-${i}`)]);
    await Promise.all(targets.map((pair) => placeFifos(mkfifo, () => stockDir, pair)));
    expect(calls()).toBe(1);
    for (const path of targets.flat()) {
      const stat = statSync(path);
      expect(stat.isFIFO()).toBe(true);
      expect(stat.mode & 0o777).toBe(0o600);
    }
    expect(readdirSync(stockDir)).toEqual([]);
    // The ninth process's takes a new batch.
    await placeFifos(mkfifo, () => stockDir, [join(work, "in-8"), join(work, "out-8")]);
    expect(calls()).toBe(2);
    expect(readdirSync(stockDir)).toHaveLength(14);
  });

  it("a stock removed under it (a temp cleaner): the FIFOs are made in place, and the stock made again later", async () => {
    rmSync(join(work, "stock"), { recursive: true, force: true });
    const pair = [join(work, "in-late"), join(work, "out-late")];
    await placeFifos(mkfifo, () => join(work, "stock"), pair);
    for (const path of pair) expect(statSync(path).isFIFO()).toBe(true);
    const before = calls();
    // The directory is back (the host makes its directory again): stocking resumes there.
    mkdirSync(join(work, "stock"), { mode: 0o700 });
    await placeFifos(mkfifo, () => join(work, "stock"), [join(work, "in-again"), join(work, "out-again")]);
    expect(calls()).toBe(before + 1);
    expect(statSync(join(work, "in-again")).isFIFO()).toBe(true);
  });
});
