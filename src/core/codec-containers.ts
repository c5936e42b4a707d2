/**
 * Weighing a text before JSON.parse builds it: the host's codec refuses text holding more than
 * MAX_CONTAINERS objects and arrays. JSON.parse of a guest's text runs on the host's thread, and
 * its cost follows the objects it makes, not the bytes: 16 M characters of `[{},{},…]` (5.3 M
 * empty objects, one shared object in the guest) held the host's loop 2.5–3.4 s and kept 326 MB;
 * a million took its decode 0.37–1.6 s (warm, then cold and loaded) and ~77 MB, about what 16 MB
 * of ordinary records (~450,000 objects) or of short strings (no object at all) cost.
 *
 * Counted, not parsed: a bracket outside a string opens one, and a text shorter than two brackets
 * a container cannot hold more (a result under 2 M characters is not read at all). ~1.7 ns a
 * character here (27 ms for 16 M), against ~160 ns a character to parse the same text.
 *
 * Used by the host's codec only (`trusted`): a guest decodes what the host sends it under its own
 * limits. SELF-CONTAINED, like every part of the codec: it is stringified into guest realms
 * (codec.ts), where it is never called, so it reads the text's own methods (the host's realm's).
 */
import type { CodecBuiltins } from "./codec-builtins.js";
import type { CodecFailures } from "./codec-failures.js";

export function createContainerWeight(builtins: CodecBuiltins, failures: CodecFailures) {
  const { MAX_CONTAINERS } = builtins;

  /** Does `text` open more than `most` objects and arrays outside its strings? */
  function exceeds(text: string, most: number): boolean {
    // Each container is two brackets at least: a shorter text cannot hold more.
    if (text.length < 2 * most + 2) return false;
    let count = 0;
    const n = text.length;
    for (let i = 0; i < n; i++) {
      const c = text.charCodeAt(i);
      if (c === 34) {
        // A string: to its closing quote, each escape's next character skipped.
        for (i++; i < n; i++) {
          const d = text.charCodeAt(i);
          if (d === 92) i++;
          else if (d === 34) break;
        }
      } else if ((c === 123 || c === 91) && ++count > most) return true;
    }
    return false;
  }

  /**
   * Refuse (ERR_NOT_SERIALIZABLE, at `rootPath`) a text of more than MAX_CONTAINERS objects and
   * arrays, plus `allowance` (what an envelope adds around a value: a worker's whole RunResult).
   */
  function weigh(text: string, rootPath: string, allowance: number): void {
    const most = MAX_CONTAINERS + allowance;
    if (!exceeds(text, most)) return;
    failures.fail(
      "ERR_NOT_SERIALIZABLE",
      rootPath,
      rootPath +
        ": more than " +
        MAX_CONTAINERS +
        " objects and arrays as the codec writes them (a Date, an error, a Map's entry are one each too), the most a value crossing to the host may hold: send fewer, larger values (strings, typed arrays) instead",
    );
  }

  return weigh;
}
