import type { CodecExtension } from "./codec.js";

/**
 * The host's side of the Request / Response / Headers wire (the guest's side is
 * src/engines/guest/fetch-types.ts). Node's bodies are streams, read asynchronously, while the
 * codec is synchronous: `readBodies` buffers the bodies of the values about to cross first.
 */
const bodies = new WeakMap<object, Uint8Array | null>();
// Node loads its fetch implementation (undici) on first touch of these globals, and that load
// installs a global dispatcher symbol. Touch them at import, not in the middle of a run.
void [Request, Response, Headers];
const NULL_BODY_STATUS = new Set([101, 204, 205, 304]);

/** Buffer the bodies of Requests and Responses among `values` (and one level inside arrays and objects). */
export async function readBodies(values: unknown[]): Promise<void> {
  const pending: Promise<void>[] = [];
  const visit = (value: unknown, depth: number) => {
    if (value instanceof Request || value instanceof Response) {
      if (!bodies.has(value)) {
        pending.push(
          value
            .clone()
            .arrayBuffer()
            .then((buffer) => void bodies.set(value, value.body === null ? null : new Uint8Array(buffer))),
        );
      }
    } else if (depth < 2 && value !== null && typeof value === "object") {
      for (const item of Array.isArray(value) ? value : Object.values(value)) visit(item, depth + 1);
    }
  };
  for (const value of values) visit(value, 0);
  await Promise.all(pending);
}

export const hostFetchExtension: CodecExtension = {
  encode(value) {
    if (value instanceof Headers) return { $: "H", h: [...value] };
    if (value instanceof Request) {
      if (!bodies.has(value)) throw new TypeError("a Request's body must be read before it crosses (internal)");
      return { $: "Q", m: value.method, u: value.url, h: [...value.headers], b: bodies.get(value) ?? null };
    }
    if (value instanceof Response) {
      if (!bodies.has(value)) throw new TypeError("a Response's body must be read before it crosses (internal)");
      return { $: "R", s: value.status, t: value.statusText, h: [...value.headers], b: bodies.get(value) ?? null };
    }
    return undefined;
  },
  decode(tagged, revive) {
    const headers = revive(tagged.h) as [string, string][];
    const body = (revive(tagged.b) ?? null) as Uint8Array | null;
    switch (tagged.$) {
      case "H":
        return new Headers(headers);
      case "Q": {
        const method = String(tagged.m);
        const withBody = body !== null && method !== "GET" && method !== "HEAD";
        return new Request(String(tagged.u), { method, headers, body: withBody ? body : null });
      }
      case "R": {
        const status = Number(tagged.s);
        if (status === 0) return Response.error();
        return new Response(NULL_BODY_STATUS.has(status) ? null : body, { status, statusText: String(tagged.t ?? ""), headers });
      }
      default:
        return undefined;
    }
  },
};
