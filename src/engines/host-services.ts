/**
 * Services every engine's guest runtime borrows from the host, synchronously and as text:
 * WHATWG URL parsing (so guests get Node's exact parser) and random bytes.
 *
 * SELF-CONTAINED: the QuickJS worker thread evaluates `createHostServices.toString()`, so the
 * v8 engine and the worker share this one implementation. Only globals are used (URL, crypto).
 *
 * Each URL call runs on a thread other runs share (the host's own, on v8), in one piece, so its
 * work is bounded before Node's parser sees the text (README, "URLs parsed on the host"):
 * - a serialized URL is at most MAX_HREF code units. Percent-encoding grows text up to 9x (one
 *   CJK character is `%E4%B8%80`), so an input is first weighed by what it can grow to, and the
 *   result is checked again;
 * - a host that IDNA must process (non-ASCII, a percent-escape or an `xn--` label) is at most
 *   MAX_IDNA_HOST bytes and MAX_IDNA_LABEL per label: Punycode's cost grows with the square of
 *   a label (16,000 distinct CJK characters in one label: 1.4 s in Node 20's parser; 200,000
 *   characters of `xn--baba…`: 1.1 s).
 */
export interface HostServices {
  /**
   * A URL's parts: `[origin (blob: only, else null), lengths of protocol, username, password,
   * hostname, port, pathname, search, hash]` as JSON, a newline, then the href. "" when `input`
   * (against `base`) is not a URL, "!" and a message when a limit refuses it.
   */
  parseUrl(input: unknown, base?: unknown): string;
  /** Set one component of `href` (a result of these services); the new parts as parseUrl returns them. */
  setUrlPart(href: unknown, part: unknown, value: unknown): string;
  /** Up to 65 536 cryptographically random bytes. */
  randomBytes(n: unknown): Uint8Array;
  /** MAX_URL_LENGTH: the guest sends no longer text (a refusal needs no more). */
  maxUrlLength: number;
}

/** The longest href (UTF-16 code units) the URL services produce; longer input is refused. */
export const MAX_URL_LENGTH = 1 << 20;

export function createHostServices(): HostServices {
  const SETTABLE = ["href", "protocol", "username", "password", "host", "hostname", "port", "pathname", "search", "hash"];
  const MAX_HREF = 1 << 20; // MAX_URL_LENGTH (this body is stringified: it cannot read the export)
  const MAX_IDNA_HOST = 4096;
  const MAX_IDNA_LABEL = 1024;
  const MAX_RANDOM_BYTES = 65536;
  // Refusals start with "!"; the guest puts the rest in the error it throws.
  const TOO_LONG = `!URL longer than cordon's limit of ${MAX_HREF} characters (1 MiB), counted percent-encoded (one non-ASCII character can take 9)`;
  const HOST_TOO_LONG = `!URL host over cordon's limit for hosts that need IDNA (non-ASCII characters, percent-escapes or an xn-- label): ${MAX_IDNA_HOST} bytes, ${MAX_IDNA_LABEL} per label`;

  // Classes of ASCII characters, for refusal(). Letters, digits and "-._~!$&()*+,%" have none
  // (hex digits: HEX only).
  const SKIP = 1; // tab, LF, CR: the parser drops them anywhere
  const ENCODED = 2; // percent-encoded (3 characters) in some component: its size is 1 + (k & ENCODED)
  const USERINFO = 4; // percent-encoded in userinfo only
  const ENDS = 8; // ends a part that could be a host: / \ ? #
  const AT = 16;
  const SLASHY = 32; // after it, a host can start: / \ :
  const HEX = 64;
  const CLASS = new Uint8Array(128);
  const mark = (chars: string, k: number) => {
    for (let i = 0; i < chars.length; i++) CLASS[chars.charCodeAt(i)] |= k;
  };
  for (let c = 0; c <= 0x20; c++) CLASS[c] = c === 0x09 || c === 0x0a || c === 0x0d ? SKIP : ENCODED;
  mark("\"#'<>?^`{}\x7f", ENCODED);
  mark("/:;=@[\\]|", USERINFO);
  mark("/\\?#", ENDS);
  mark("@", AT);
  mark("/\\:", SLASHY);
  mark("0123456789abcdefABCDEF", HEX);

  /**
   * One pass over text the parser will read: "" when it is within the limits, else the refusal.
   * Both checks over-estimate, never under. `maxSize` bounds what the text can serialize to
   * (`userinfo`: it is a username or password, whose percent-encode set is the widest).
   * `hosts`: the text can hold a host. A part that could be a host is any run between `/ \\ ? #`
   * at the start, after `scheme:` or after two slashes, up to the first `?` or `#`; its host is
   * what follows its last `@`, counted in UTF-8 bytes once escapes are decoded (so escaping a
   * host, as serializing an opaque one does, leaves its count unchanged).
   * Every character adds at least 1 to the size, so the loop ends within maxSize steps.
   */
  function refusal(text: string, maxSize: number, userinfo: boolean, hosts: boolean): string {
    let size = 0;
    let candidate = hosts; // the current part could be a host
    let ended = !hosts; // past the first ? or #: no host follows
    let slashy = true; // the previous character was / \ : (the start counts as one)
    let pendingUserinfo = 0; // extra size if this part's text so far is userinfo (an @ follows)
    let idna = false; // the host so far needs IDNA
    let hostBytes = 0;
    let labelBytes = 0;
    let maxLabel = 0;
    let labelAt = 0; // characters of the current label while it may start with "xn--"
    let xn = true; // the current label still matches the start of "xn--"
    let hexLeft = 0; // hex digits of a percent-escape still to come
    const n = text.length;
    for (let i = 0; i < n; i++) {
      const c = text.charCodeAt(i);
      if (c >= 0x80) {
        size += 9;
        if (size > maxSize) return TOO_LONG;
        slashy = false;
        if (candidate) {
          const bytes = c < 0x800 || (c >= 0xd800 && c <= 0xdfff) ? 2 : 3;
          labelBytes += bytes;
          hostBytes += bytes;
          idna = true;
          xn = false;
          hexLeft = 0;
        }
        continue;
      }
      const k = CLASS[c];
      size += 1 + (k & ENCODED);
      if (size > maxSize) return TOO_LONG;
      if ((k & ~HEX) === 0) {
        // Letters, digits and the like: most of any URL.
        slashy = false;
        if (!candidate) continue;
        if (hexLeft > 0) {
          if (k === HEX) {
            hexLeft--; // part of the byte its % counted
            continue;
          }
          hexLeft = 0;
        }
        if (c === 0x25) {
          idna = true;
          xn = false;
          hexLeft = 2;
        } else if (c === 0x2e) {
          if (labelBytes > maxLabel) maxLabel = labelBytes;
          labelBytes = labelAt = 0;
          xn = true;
          hostBytes++;
          continue;
        } else if (xn) {
          const l = c | 0x20; // ASCII letters in lower case; "-" is unchanged
          xn = labelAt === 0 ? l === 0x78 : labelAt === 1 ? l === 0x6e : c === 0x2d;
          if (xn && ++labelAt === 4) {
            idna = true;
            xn = false;
          }
        }
        labelBytes++;
        hostBytes++;
        continue;
      }
      if ((k & SKIP) !== 0) continue;
      if (userinfo && (k & USERINFO) !== 0) size += 2;
      if ((k & ENDS) !== 0) {
        if (candidate) {
          if (labelBytes > maxLabel) maxLabel = labelBytes;
          if (idna && (hostBytes > MAX_IDNA_HOST || maxLabel > MAX_IDNA_LABEL)) return HOST_TOO_LONG;
          idna = false;
          hostBytes = labelBytes = maxLabel = labelAt = hexLeft = pendingUserinfo = 0;
          xn = true;
        }
        if (c === 0x3f || c === 0x23) ended = true;
        candidate = !ended && slashy;
        slashy = (k & SLASHY) !== 0;
        continue;
      }
      slashy = (k & SLASHY) !== 0;
      if (!candidate) continue;
      if ((k & AT) !== 0) {
        // What came before was userinfo: the host starts again after it.
        size += pendingUserinfo;
        pendingUserinfo = 2; // this @ too, should another follow
        idna = false;
        hostBytes = labelBytes = maxLabel = labelAt = hexLeft = 0;
        xn = true;
        continue;
      }
      if ((k & USERINFO) !== 0) pendingUserinfo += 2;
      labelBytes++;
      hostBytes++;
      xn = false;
      hexLeft = 0;
    }
    if (labelBytes > maxLabel) maxLabel = labelBytes;
    if (candidate && idna && (hostBytes > MAX_IDNA_HOST || maxLabel > MAX_IDNA_LABEL)) return HOST_TOO_LONG;
    return "";
  }

  /** The parts as parseUrl documents them; the guest slices each one out of the href. */
  function parts(url: URL): string {
    const href = url.href;
    if (href.length > MAX_HREF) return TOO_LONG;
    let origin: string | null = null;
    if (url.protocol === "blob:") {
      // Node's origin getter parses the path as a URL of its own: weigh it first.
      if (refusal(url.pathname, Number.POSITIVE_INFINITY, false, true) !== "") return HOST_TOO_LONG;
      origin = url.origin;
    }
    const lengths = [
      origin,
      url.protocol.length,
      url.username.length,
      url.password.length,
      url.hostname.length,
      url.port.length,
      url.pathname.length,
      url.search.length,
      url.hash.length,
    ];
    return `${JSON.stringify(lengths)}\n${href}`;
  }

  function parseUrl(input: unknown, base?: unknown): string {
    if (typeof input !== "string" || (base !== undefined && typeof base !== "string")) return "";
    // Each text must fit on its own; the result is checked again (parts).
    const bad = refusal(input, MAX_HREF, false, true) || (base === undefined ? "" : refusal(base, MAX_HREF, false, true));
    if (bad !== "") return bad;
    try {
      return parts(base === undefined ? new URL(input) : new URL(input, base));
    } catch {
      return "";
    }
  }

  return {
    maxUrlLength: MAX_HREF,
    parseUrl,
    setUrlPart(href, part, value) {
      if (typeof href !== "string" || typeof part !== "string" || typeof value !== "string") return "";
      if (!SETTABLE.includes(part)) return "";
      if (part === "href") return parseUrl(value);
      // href is the runtime's snapshot of a result of these services (guest code cannot reach
      // them): ASCII, within MAX_HREF, its hosts already weighed as input. Only its size is rechecked.
      if (href.length > MAX_HREF) return TOO_LONG;
      const bad = refusal(value, MAX_HREF, part === "username" || part === "password", part === "host" || part === "hostname");
      if (bad !== "") return bad;
      try {
        const url = new URL(href);
        (url as unknown as Record<string, string>)[part] = value;
        return parts(url);
      } catch {
        return "";
      }
    },
    randomBytes(n) {
      const size = typeof n === "number" && n >= 0 ? Math.min(Math.floor(n), MAX_RANDOM_BYTES) : 0;
      return globalThis.crypto.getRandomValues(new Uint8Array(size));
    },
  };
}

/** The host's instance, for engines that run in this realm (v8). */
export const hostServices: HostServices = createHostServices();
