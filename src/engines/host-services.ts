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

  const NO_HOST = 0;
  const HOST = 1;
  const BARE_HOST = 2;
  /** With HOST or BARE_HOST: the text is relative, so its start is no host (only `//` leads to one). */
  const RELATIVE = 4;
  const SPECIAL = ["http", "https", "ws", "wss", "ftp"];

  /**
   * Which hosts `text` can hold, as parsed against a base whose own is `baseHosts`: BARE_HOST
   * when it starts with `file:`, HOST with another special scheme, NO_HOST with any other scheme
   * (Node's parser keeps such a host opaque, with no IDNA: 16,000 CJK characters in one took
   * 3 ms), or, when the first 64 characters show no scheme, the base's, as RELATIVE (the parser
   * trims leading C0 controls and spaces, drops tabs and newlines).
   */
  function hostsOf(text: string, baseHosts: number): number {
    const n = text.length;
    let i = 0;
    while (i < n && text.charCodeAt(i) <= 0x20) i++;
    let name = "";
    for (let seen = 0; i < n && seen < 64; i++) {
      const c = text.charCodeAt(i);
      if (c === 0x09 || c === 0x0a || c === 0x0d) continue;
      if (c === 0x3a && seen > 0) {
        // `name` holds the first 5 letters: every special scheme fits.
        if (seen > 5) return NO_HOST;
        return name === "file" ? BARE_HOST : SPECIAL.includes(name) ? HOST : NO_HOST;
      }
      const l = c | 0x20;
      const letter = l >= 0x61 && l <= 0x7a;
      if (!letter && (seen === 0 || !((c >= 0x30 && c <= 0x39) || c === 0x2b || c === 0x2d || c === 0x2e))) break;
      if (seen < 5) name += String.fromCharCode(l);
      seen++;
    }
    return baseHosts === NO_HOST ? NO_HOST : baseHosts | RELATIVE;
  }

  /**
   * One pass over text the parser will read: "" when it is within the limits, else the refusal.
   * Every character adds at least 1 to the size, so the loop ends within maxSize steps.
   *
   * `maxSize` bounds what the text can serialize to (`userinfo`: it is a username or password,
   * whose percent-encode set is the widest). That count is high, never low, but for what the
   * parser adds (`ws:x` is `ws://x/`: a fuzz of 300,000 inputs found at most 12 characters more,
   * with IDNA's growth of a host, itself bounded here): parts() checks the result again.
   *
   * `hosts`: whether the text can hold a host: NO_HOST, HOST, or BARE_HOST, one no userinfo can
   * precede (a file: URL's, the host setters' value), each with RELATIVE for relative text. A
   * part that could be a host is any run between `/ \ ? #` that starts the text (unless it is
   * RELATIVE) or whose slash follows `:` or another slash (`http:x`, `http:/x`, `//x`), up to
   * the first `?` or `#`; its host is what follows its last `@` (for
   * HOST, and before any `[`). It is counted in UTF-8 bytes once escapes are decoded (so
   * escaping a host, as serializing an opaque one does, never raises its count; a surrogate
   * counts 3, as a lone one becomes U+FFFD). That count is never low.
   */
  function refusal(text: string, maxSize: number, userinfo: boolean, hosts: number): string {
    let size = 0;
    const kind = hosts & ~RELATIVE;
    let candidate = kind !== NO_HOST && (hosts & RELATIVE) === 0; // the current part could be a host
    let ended = kind === NO_HOST; // past the first ? or #: no host follows
    let slashy = true; // the previous character was / \ : (the start counts as one)
    let pendingUserinfo = 0; // extra size if the text since the last / ? # is userinfo (an @ follows)
    let idna = false; // the host so far needs IDNA
    let hostBytes = 0;
    let labelBytes = 0;
    let maxLabel = 0;
    let labelAt = 0; // characters of the current label while it may start with "xn--"
    let xn = true; // the current label still matches the start of "xn--"
    let hexLeft = 0; // hex digits of a percent-escape still to come
    let bracket = false; // inside [ ] of a host
    let bracketed = false; // this part had a [: past it, an @ may no longer be in the authority
    const n = text.length;
    for (let i = 0; i < n; i++) {
      const c = text.charCodeAt(i);
      if (c >= 0x80) {
        size += 9;
        if (size > maxSize) return TOO_LONG;
        slashy = false;
        if (candidate) {
          const bytes = c < 0x800 ? 2 : 3;
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
      // Userinfo's set escapes : ; = @ [ \ ] | too. In a URL, what comes before an authority's
      // @ is userinfo; / ? # end an authority (and \ a special scheme's: not ending it there
      // only over-counts).
      if (userinfo) {
        if ((k & USERINFO) !== 0) size += 2;
      } else if (!ended) {
        if (c === 0x40) {
          size += pendingUserinfo;
          pendingUserinfo = 2; // this @ too, should another follow
        } else if (c === 0x2f || c === 0x3f || c === 0x23) pendingUserinfo = 0;
        else if ((k & USERINFO) !== 0) pendingUserinfo += 2;
      }
      if (size > maxSize) return TOO_LONG;
      if ((k & ENDS) !== 0 && !(bracket && c !== 0x23)) {
        bracket = bracketed = false;
        if (candidate) {
          if (labelBytes > maxLabel) maxLabel = labelBytes;
          if (idna && (hostBytes > MAX_IDNA_HOST || maxLabel > MAX_IDNA_LABEL)) return HOST_TOO_LONG;
          idna = false;
          hostBytes = labelBytes = maxLabel = labelAt = hexLeft = 0;
          xn = true;
        }
        if (c === 0x3f || c === 0x23) ended = true;
        candidate = !ended && slashy;
        slashy = (k & SLASHY) !== 0;
        continue;
      }
      slashy = (k & SLASHY) !== 0;
      if (!candidate) continue;
      // Node 20's parser reads a host from a [ to the next ] (else to the fragment), across
      // / \ ? and any @ there: "http://a[/" and 2,400 CJK characters spent 16 ms in IDNA.
      if (c === 0x5b) bracket = bracketed = true;
      else if (c === 0x5d) bracket = false;
      if ((k & AT) !== 0 && kind !== BARE_HOST && !bracketed) {
        // What came before was userinfo: the host starts again after it.
        idna = false;
        hostBytes = labelBytes = maxLabel = labelAt = hexLeft = 0;
        xn = true;
        continue;
      }
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
      const path = url.pathname;
      if (refusal(path, Number.POSITIVE_INFINITY, false, hostsOf(path, HOST)) !== "") return HOST_TOO_LONG;
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
    // A base without a scheme fails before its host is parsed: BARE_HOST covers every other case.
    const baseHosts = base === undefined ? HOST : hostsOf(base, BARE_HOST);
    const bad =
      refusal(input, MAX_HREF, false, hostsOf(input, baseHosts)) ||
      (base === undefined ? "" : refusal(base, MAX_HREF, false, baseHosts));
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
      const hosts = part === "host" || part === "hostname" ? BARE_HOST : NO_HOST;
      const bad = refusal(value, MAX_HREF, part === "username" || part === "password", hosts);
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
