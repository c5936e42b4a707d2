import { describe, expect, it } from "vitest";
import type { HostEvent } from "../../src/core/protocol.js";
import { valuesOfAnswer } from "../../src/hosts/process/answers.js";
import { ValueBatch } from "../../src/hosts/process/value-batch.js";

type ValueEvent = Extract<HostEvent, { t: "value" }>;
const value = (id: number, valueText: string): ValueEvent => ({ t: "value", id, valueText, run: [id, 2, -1, 0, 1] });

function batch() {
  const written: HostEvent[] = [];
  const lanes: number[] = [];
  const values = new ValueBatch((event, lane) => {
    written.push(event);
    lanes.push(lane);
  });
  return { written, lanes, values };
}

describe("a worker's value answers of one tick (ValueBatch)", () => {
  it("writes several as one values frame the host reads back as the same answers, in order", () => {
    const { written, values } = batch();
    const sent = [value(3, "1"), value(7, '{"a":"\\u0001"}'), value(9, '"x"')];
    for (const event of sent) values.add(event, 5);
    expect(written).toEqual([]);
    values.flush();
    expect(written).toHaveLength(1);
    const frame = written[0] as Extract<HostEvent, { t: "values" }>;
    expect(frame.t).toBe("values");
    expect(valuesOfAnswer(frame.ids, frame.runs, frame.valueText)).toEqual(sent);
    values.flush();
    expect(written).toHaveLength(1);
  });

  it("writes a lone value as the value frame it was", () => {
    const { written, values } = batch();
    values.add(value(4, "true"), 4);
    values.flush();
    expect(written).toEqual([value(4, "true")]);
  });

  it("writes one frame per lane, each in its lane, in the order the lanes came", () => {
    const { written, lanes, values } = batch();
    values.add(value(1, "1"), 10);
    values.add(value(2, "2"), 10);
    values.add(value(3, "3"), 20);
    values.add(value(4, "4"), 10);
    values.flush();
    expect(lanes).toEqual([10, 20, 10]);
    expect(written.map((event) => ("ids" in event ? event.ids : [(event as { id: number }).id]))).toEqual([[1, 2], [3], [4]]);
  });

  it("takes only short values with no stats riding on them", () => {
    expect(ValueBatch.takes(value(1, "1"))).toBe(true);
    expect(ValueBatch.takes({ ...value(1, "1"), stats: { warmInstances: 0 } as never })).toBe(false);
    expect(ValueBatch.takes(value(1, `"${"x".repeat(70_000)}"`))).toBe(false);
    expect(ValueBatch.takes({ t: "result", id: 1, resultText: "{}" })).toBe(false);
  });

  it("writes at once past a megabyte of values", () => {
    const { written, values } = batch();
    const big = `"${"y".repeat(60_000)}"`;
    for (let i = 0; i < 20; i++) values.add(value(i, big), 1);
    expect(written).toHaveLength(1);
    expect((written[0] as { ids: number[] }).ids).toHaveLength(18);
  });
});

describe("reading a values answer (valuesOfAnswer)", () => {
  it("refuses one whose ids, stats and texts do not line up", () => {
    const runs = [1, 1, -1, 0, 0, 1, 1, -1, 0, 0];
    expect(valuesOfAnswer([1, 2], runs, "1\u00012")).toHaveLength(2);
    expect(valuesOfAnswer([1, 2], runs, "1")).toBeUndefined();
    expect(valuesOfAnswer([1, 2], runs, "1\u00012\u00013")).toBeUndefined();
    expect(valuesOfAnswer([1, 2], runs.slice(1), "1\u00012")).toBeUndefined();
    expect(valuesOfAnswer([1], runs.slice(5), "1")).toBeUndefined();
    expect(valuesOfAnswer("1,2", runs, "1\u00012")).toBeUndefined();
    expect(valuesOfAnswer([1, 2], runs, 12)).toBeUndefined();
  });
});
