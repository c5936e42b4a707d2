import type { LookupAddress, LookupOneOptions } from "node:dns";
import { Agent } from "undici";
import type { ResolvedAddress } from "./resolve.js";

type LookupCallback = (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A dispatcher that can only connect to addresses already checked. The socket's `lookup` answers
 * from the checked list instead of asking DNS again, so nothing can change between the check and
 * the connect (DNS rebinding), while the URL keeps its host name: TLS sends it as SNI and verifies
 * the certificate against it, and the Host header carries it. An address-literal host never calls
 * `lookup`; the socket connects to the literal that was classified.
 *
 * One agent per hop of one request, closed with it: no pooled connection outlives its check.
 */
export function pinnedAgent(hostname: string, addresses: readonly ResolvedAddress[], connectTimeoutMs: number): Agent {
  const lookup = (name: string, options: LookupOneOptions | LookupCallback, callback?: LookupCallback) => {
    const done = (typeof options === "function" ? options : callback) as LookupCallback;
    const opts = (typeof options === "function" ? {} : options) as LookupOneOptions & { all?: boolean };
    const family = opts.family === 4 || opts.family === 6 ? opts.family : 0;
    const usable = addresses.filter((a) => family === 0 || a.family === family);
    if (name !== hostname || usable.length === 0) {
      // Not the host that was checked, or no checked address of the family asked for: fail the
      // connection rather than fall back to a resolution of our own.
      const error: NodeJS.ErrnoException = new Error(`egress: no checked address for ${JSON.stringify(name)}`);
      error.code = "ENOTFOUND";
      process.nextTick(done, error, "", 0);
      return;
    }
    const checked = usable.map(({ address, family }) => ({ address, family }));
    if (opts.all) process.nextTick(done, null, checked);
    else process.nextTick(done, null, checked[0].address, checked[0].family);
  };
  return new Agent({
    connect: { lookup: lookup as never, timeout: connectTimeoutMs },
    connections: 1,
    pipelining: 1,
    maxRedirections: 0,
    allowH2: false,
  });
}
