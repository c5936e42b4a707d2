import { classifyAddress, parseAddress } from "./addresses.js";
import { narrowAllowList } from "./narrow.js";
import { isLocalhostName } from "./resolve.js";
import { normalizeHost } from "./rules.js";

/**
 * The deno engine's `--allow-import` hosts for `capabilities.import` (`"esm.sh"`,
 * `"example.com:8443"`). Deno fetches remote modules itself, resolving names on its own: no
 * address check, no pinning. What can be checked is the list:
 *
 * - a loopback or other special-purpose address literal (any form: `127.1`, `2130706433`) and
 *   `localhost` / `*.localhost` are refused with a TypeError, ceiling or not;
 * - with a ceiling (`policy.net.allow`), entries are narrowed as `capabilities.net` rules are
 *   (narrowAllowList: an entry the ceiling does not cover is dropped). A port-less entry means
 *   the scheme's default port there but any port to Deno, so a kept one is written `host:80`
 *   and `host:443`;
 * - without a ceiling, the entries stand as written (normalized).
 */
export function importAllowList(ceiling: readonly string[] | null, hosts: readonly string[]): string[] {
  const entries = hosts.map((entry, i) => {
    const at = `capabilities.import[${i}] (${JSON.stringify(entry)})`;
    const colon = entry.lastIndexOf(":");
    let host: string;
    try {
      host = normalizeHost(colon === -1 ? entry : entry.slice(0, colon));
    } catch (error) {
      throw new TypeError(`cordon: ${at}: ${(error as Error).message}`);
    }
    const verdict = parseAddress(host) === null ? (isLocalhostName(host) ? "loopback" : "public") : classifyAddress(host);
    if (verdict !== "public") throw new TypeError(`cordon: ${at} is ${verdict}, not a public host`);
    if (colon === -1) return host;
    const port = Number(entry.slice(colon + 1));
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new TypeError(`cordon: ${at}: the port is not 1..65535`);
    return `${host}:${port}`;
  });
  if (ceiling === null) return [...new Set(entries)];
  const kept = narrowAllowList(ceiling, entries) as string[];
  return [...new Set(kept.flatMap((entry) => (entry.includes(":") ? [entry] : [`${entry}:80`, `${entry}:443`])))];
}
