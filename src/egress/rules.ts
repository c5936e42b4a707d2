/**
 * Net rules: which hosts, ports, paths and methods a guest may reach.
 *
 * - `"api.example.com"`: that host exactly; `"*.cdn.io"`: its subdomains, not the apex;
 *   `"*"`: any host. `"[::1]"` for an IPv6 literal.
 * - `":port"` after any of them: that port only. Without one, a rule matches the scheme's default
 *   port only (80 for http, 443 for https), never another.
 * - `{ host, port?, routes? }`: the same, narrowed to `routes` (`path` patterns, optional `methods`).
 *
 * Hosts are compared after WHATWG URL normalization on both sides (lowercase, IDNA to punycode,
 * legacy IPv4 forms to dotted decimal) with one trailing dot removed, so `API.Example.com.` and
 * `api.example.com` are the same host and `bücher.test` is `xn--bcher-kva.test`.
 */
export interface NetRoute {
  /** `/exact`, `/items/:id` (`:name` is one non-empty segment), `/files/*` (one segment), `/users/**` (any rest, even none). */
  path: string;
  /** Allowed methods (fetch-normalized: `get` is `GET`, `patch` stays `patch`). Absent: any method. */
  methods?: string[];
}

export interface NetRuleObject {
  host: string;
  port?: number;
  routes?: NetRoute[];
}

export type NetRule = string | NetRuleObject;

export type HostPattern = { kind: "any" } | { kind: "exact"; host: string } | { kind: "subdomains"; of: string };

interface CompiledRoute {
  segments: string[];
  methods: ReadonlySet<string> | null;
}

export interface CompiledRule {
  /** The rule as written, for messages. */
  source: NetRule;
  host: HostPattern;
  /** null: the scheme's default port only. */
  port: number | null;
  /** null: every path and method. */
  routes: CompiledRoute[] | null;
}

/** Rules checked once, matched many times. */
export interface CompiledRules {
  readonly compiled: readonly CompiledRule[];
}

export type MatchResult = { ok: true; rule: CompiledRule } | { ok: false; reason: string };

const STANDARD_METHODS = new Set(["DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT"]);
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const PARAM = /^:[A-Za-z_][A-Za-z0-9_]*$/;
const RULE_KEYS = new Set(["host", "port", "routes"]);
const ROUTE_KEYS = new Set(["path", "methods"]);

/** fetch's method normalization: the six standard methods are uppercased, others kept as written. */
export function normalizeMethod(method: string): string {
  const upper = method.toUpperCase();
  return STANDARD_METHODS.has(upper) ? upper : method;
}

/** A URL hostname as rules see it: one trailing dot removed. */
export function ruleHostOf(url: URL): string {
  return url.hostname.endsWith(".") ? url.hostname.slice(0, -1) : url.hostname;
}

/** The port a URL connects to, its scheme's default when it names none. */
export function effectivePort(url: URL): number {
  if (url.port !== "") return Number(url.port);
  return url.protocol === "https:" ? 443 : 80;
}

function describe(rule: NetRule): string {
  return typeof rule === "string" ? JSON.stringify(rule) : JSON.stringify(rule.host);
}

/** Normalize a host the way a request URL's host is normalized; throws a message on anything else. */
export function normalizeHost(text: string): string {
  // URL silently drops tabs and newlines and would read `a/b` or `a@b` as more than a host:
  // refuse those characters instead of letting the parser reinterpret the rule.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: rejecting control characters is the point
  if (text === "" || /[\u0000-\u0020\u007f/?#@\\*%]/.test(text)) throw new Error(`${JSON.stringify(text)} is not a host`);
  let url: URL;
  try {
    url = new URL(`http://${text}/`);
  } catch {
    throw new Error(`${JSON.stringify(text)} is not a valid host`);
  }
  if (url.port !== "" || url.pathname !== "/" || url.username !== "" || url.password !== "") {
    throw new Error(`${JSON.stringify(text)} is not a bare host`);
  }
  const host = ruleHostOf(url);
  if (host === "" || host.endsWith(".")) throw new Error(`${JSON.stringify(text)} is not a valid host`);
  return host;
}

function parsePort(text: string | number): number {
  const port = typeof text === "number" ? text : /^\d{1,5}$/.test(text) ? Number(text) : Number.NaN;
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`port ${JSON.stringify(text)} is not 1..65535`);
  return port;
}

function parseHostPattern(text: string): HostPattern {
  if (text === "*") return { kind: "any" };
  if (text.startsWith("*.")) {
    const of = normalizeHost(text.slice(2));
    if (of.startsWith("[") || /^[0-9.]+$/.test(of)) {
      throw new Error(`${JSON.stringify(text)}: a wildcard needs a domain, not an address`);
    }
    return { kind: "subdomains", of };
  }
  return { kind: "exact", host: normalizeHost(text) };
}

/** Split `host[:port]`, where an IPv6 host must be bracketed. */
function splitHostPort(text: string): { host: string; port: number | null } {
  if (text.startsWith("[")) {
    const end = text.indexOf("]");
    const rest = end === -1 ? "" : text.slice(end + 1);
    if (end === -1 || (rest !== "" && !rest.startsWith(":"))) throw new Error(`${JSON.stringify(text)} is not host[:port]`);
    return { host: text.slice(0, end + 1), port: rest === "" ? null : parsePort(rest.slice(1)) };
  }
  const colon = text.indexOf(":");
  if (colon === -1) return { host: text, port: null };
  if (text.indexOf(":", colon + 1) !== -1) throw new Error(`${JSON.stringify(text)}: bracket an IPv6 host ("[::1]:8080")`);
  return { host: text.slice(0, colon), port: parsePort(text.slice(colon + 1)) };
}

function compileRoute(route: unknown, at: string): CompiledRoute {
  if (route === null || typeof route !== "object" || Array.isArray(route)) throw new Error(`${at} must be { path, methods? }`);
  for (const key of Object.keys(route))
    if (!ROUTE_KEYS.has(key)) throw new Error(`${at} has an unknown key ${JSON.stringify(key)}`);
  const { path, methods } = route as { path?: unknown; methods?: unknown };
  if (typeof path !== "string" || !path.startsWith("/")) throw new Error(`${at}.path must be a string starting with "/"`);
  // Patterns are compared with the path as URL normalizes it; a pattern URL would rewrite
  // (dot segments, spaces, non-ASCII) could never match as written, so it is refused.
  const normalized = new URL(path, "http://h").pathname;
  if (normalized !== path || path.includes("?") || path.includes("#")) {
    throw new Error(
      `${at}.path ${JSON.stringify(path)} is not a normalized path (URL reads it as ${JSON.stringify(normalized)})`,
    );
  }
  const segments = path.slice(1).split("/");
  segments.forEach((segment, i) => {
    if (segment === "**" && i !== segments.length - 1) throw new Error(`${at}.path: "**" must be the last segment`);
    if (segment.startsWith(":") && !PARAM.test(segment)) throw new Error(`${at}.path: ${JSON.stringify(segment)} is not a :name`);
    if (segment !== "*" && segment !== "**" && segment.includes("*")) {
      throw new Error(`${at}.path: "*" and "**" must be whole segments`);
    }
  });
  let allowed: Set<string> | null = null;
  if (methods !== undefined) {
    if (!Array.isArray(methods) || methods.length === 0) throw new Error(`${at}.methods must be a non-empty array`);
    allowed = new Set();
    for (const method of methods) {
      if (typeof method !== "string" || !TOKEN.test(method)) {
        throw new Error(`${at}.methods: ${JSON.stringify(method)} is not a method`);
      }
      allowed.add(normalizeMethod(method));
    }
  }
  return { segments, methods: allowed };
}

function compileRule(rule: unknown): CompiledRule {
  if (typeof rule === "string") {
    const { host, port } = splitHostPort(rule);
    return { source: rule, host: parseHostPattern(host), port, routes: null };
  }
  if (rule === null || typeof rule !== "object" || Array.isArray(rule)) {
    throw new Error("must be a string or { host, port?, routes? }");
  }
  for (const key of Object.keys(rule)) if (!RULE_KEYS.has(key)) throw new Error(`unknown key ${JSON.stringify(key)}`);
  const { host, port, routes } = rule as { host?: unknown; port?: unknown; routes?: unknown };
  if (typeof host !== "string") throw new Error("host must be a string");
  if (host.includes(":") && !host.startsWith("[")) throw new Error(`host ${JSON.stringify(host)}: put the port in "port"`);
  if (port !== undefined && typeof port !== "number") throw new Error("port must be a number");
  if (routes !== undefined && (!Array.isArray(routes) || routes.length === 0)) {
    throw new Error("routes must be a non-empty array");
  }
  return {
    source: rule as NetRuleObject,
    host: parseHostPattern(host),
    port: port === undefined ? null : parsePort(port),
    routes: routes === undefined ? null : routes.map((route, i) => compileRoute(route, `routes[${i}]`)),
  };
}

/** Check a list of rules; throws a TypeError naming the bad entry (`${where}[2]: ...`). */
export function compileRules(rules: unknown, where: string): CompiledRules {
  if (!Array.isArray(rules)) throw new TypeError(`${where} must be an array of net rules`);
  const compiled = rules.map((rule, i) => {
    try {
      return compileRule(rule);
    } catch (error) {
      throw new TypeError(`${where}[${i}] (${JSON.stringify(rule)}): ${(error as Error).message}`);
    }
  });
  return Object.freeze({ compiled: Object.freeze(compiled) });
}

/** Throws a TypeError naming the first bad entry of `rules`. */
export function validateRules(rules: unknown, where: string): asserts rules is NetRule[] {
  compileRules(rules, where);
}

/** Does a host pattern match a (normalized, trailing-dot-free) URL host? */
export function hostMatches(pattern: HostPattern, host: string): boolean {
  if (pattern.kind === "any") return true;
  if (pattern.kind === "exact") return pattern.host === host;
  // Subdomains only: `*.cdn.io` is not `cdn.io`, and never an address literal. Every label of
  // the part before it is non-empty: WHATWG URL keeps `a..cdn.io` and `.cdn.io`, which only a
  // resolver that refuses empty labels (c-ares does) kept from a custom `resolve`.
  if (!host.endsWith(`.${pattern.of}`) || host.startsWith("[") || /^[0-9.]+$/.test(host)) return false;
  const sub = host.slice(0, -pattern.of.length - 1);
  return sub !== "" && !sub.startsWith(".") && !sub.endsWith(".") && !sub.includes("..");
}

/** Does a rule's port match? A rule without a port matches only the scheme's default port. */
export function portMatches(rulePort: number | null, url: URL): boolean {
  return rulePort === null ? url.port === "" : rulePort === effectivePort(url);
}

function pathMatches(pattern: readonly string[], path: readonly string[]): boolean {
  for (let i = 0; i < pattern.length; i++) {
    const segment = pattern[i];
    if (segment === "**") return true;
    if (i >= path.length) return false;
    if (segment === "*") continue;
    if (segment.startsWith(":")) {
      if (path[i] === "") return false;
      continue;
    }
    if (segment !== path[i]) return false;
  }
  return pattern.length === path.length;
}

/**
 * The first segment of a path that an upstream may read as a dot segment, or "". Routes compare
 * segments still escaped, but servers decode before they route: nginx decodes `..%2f` and then
 * resolves the `..`; Tomcat and Spring drop `;params`, so `..;` is `..`; some decode twice, and
 * some read `\` as `/`. `/public/..%2fadmin` matched `/public/**` and reached `/admin` (found by
 * review). A segment is refused, for rules with routes, when its ASCII escapes decoded (up to
 * three rounds) and split at `/` and `\` hold a piece that is `.` or `..` once its `;` parameters
 * are dropped, or a NUL. An encoded separator alone stays allowed (an id such as npm's
 * `@scope%2fname`); WHATWG URL has already resolved plain and `%2e` dot segments. Refused too,
 * as no server reads them alike: escapes still left after those rounds (`%2525252e`), overlong
 * UTF-8 (`%c0%ae` is `.` to a lax decoder) and IIS's `%u002e`; and, read as UTF-8 and NFKC
 * normalized (as some frameworks do), a dot segment (`%EF%BC%8E%EF%BC%8E` is fullwidth `．．`).
 */
function ambiguousSegment(path: readonly string[]): string {
  for (const segment of path) {
    let text = segment;
    for (let round = 0; ; round++) {
      if (text.includes("\0") || UNREADABLE_ESCAPE.test(text) || holdsDotSegment(text)) return segment;
      const decoded = text.replace(ASCII_ESCAPE, asciiOf);
      if (decoded === text) break;
      if (round === MAX_DECODE_ROUNDS) return segment;
      text = decoded;
    }
    // Servers that normalize what they decoded (NFKC) read a fullwidth `．．／` as `../`, and a
    // fullwidth `％２ｅ` as an escape they may decode once more.
    if (NON_ASCII_ESCAPE.test(text)) {
      const normalized = utf8Decoded(text).normalize("NFKC");
      if (holdsDotSegment(normalized) || holdsDotSegment(normalized.replace(ASCII_ESCAPE, asciiOf))) return segment;
    }
  }
  return "";
}

/**
 * Does `text`, split at `/` and `\`, hold a piece that is `.` or `..` once its `;` parameters and
 * trailing whitespace are dropped (Windows and IIS trim `..%20` to `..`)?
 */
function holdsDotSegment(text: string): boolean {
  for (const piece of text.split(/[/\\]/)) {
    const bare = piece.split(";")[0].replace(TRAILING_SPACE, "");
    if (bare === "." || bare === "..") return true;
  }
  return false;
}

const TRAILING_SPACE = /[\s\0]+$/;

/** A matched `%XX` escape's character (its byte, for a non-ASCII one: see utf8Decoded). */
function asciiOf(_: string, hex: string): string {
  return String.fromCharCode(Number.parseInt(hex, 16));
}

/** `text` with its escapes read as UTF-8; malformed sequences become U+FFFD, as a lenient server reads them. */
function utf8Decoded(text: string): string {
  return Buffer.from(text.replace(ANY_ESCAPE, asciiOf), "latin1").toString("utf8");
}

/** Decoding rounds a segment gets before what is still escaped is refused unread. */
const MAX_DECODE_ROUNDS = 3;
/**
 * Overlong UTF-8 (lead bytes C0 and C1; E0 or F0 then a byte below A0 or 90; F5 to FF, which
 * no UTF-8 has, the 5- and 6-byte forms of old decoders among them) and `%uXXXX`.
 */
const UNREADABLE_ESCAPE = /%c[01]|%e0%[89]|%f0%8|%f[5-9a-f]|%u[0-9a-f]{4}/i;
const ASCII_ESCAPE = /%([0-7][0-9a-f])/gi;
const NON_ASCII_ESCAPE = /%[89a-f][0-9a-f]/i;
const ANY_ESCAPE = /%([0-9a-f]{2})/gi;

/**
 * Find the rule that allows `method` on `url`. On refusal, the reason names what failed: the host,
 * the port, the path or the method, and the rule that came closest.
 */
export function matchRule(rules: readonly NetRule[] | CompiledRules, url: URL, method: string): MatchResult {
  const { compiled } = Array.isArray(rules) ? compileRules(rules, "rules") : (rules as CompiledRules);
  const host = ruleHostOf(url);
  const verb = normalizeMethod(method);
  // The path as URL normalized it; percent-escapes stay escaped, so %2F never splits a segment.
  const path = url.pathname.slice(1).split("/");
  let reason = `host ${JSON.stringify(host)} is not in the allow list`;
  let closeness = 0;
  /** The first segment a route must not judge (ambiguousSegment), once a rule with routes needs it. */
  let ambiguous: string | undefined;
  /** The first rule whose routes allow the request. */
  let restricted: CompiledRule | undefined;
  for (const rule of compiled) {
    if (!hostMatches(rule.host, host)) continue;
    if (!portMatches(rule.port, url)) {
      if (closeness < 1) {
        closeness = 1;
        const allowed = rule.port === null ? `only the default port of ${url.protocol.slice(0, -1)}` : `only port ${rule.port}`;
        reason = `port ${effectivePort(url)} of host ${JSON.stringify(host)} is not allowed (rule ${describe(rule.source)} allows ${allowed})`;
      }
      continue;
    }
    if (rule.routes === null) return { ok: true, rule };
    ambiguous ??= ambiguousSegment(path);
    if (ambiguous !== "") {
      if (closeness < 2) {
        closeness = 2;
        reason = `path ${JSON.stringify(url.pathname)} is not allowed on host ${JSON.stringify(host)}: its segment ${JSON.stringify(ambiguous)} holds a dot segment once decoded, or escapes servers read differently, which servers resolve (rule ${describe(rule.source)} has routes)`;
      }
      continue;
    }
    for (const route of rule.routes) {
      if (!pathMatches(route.segments, path)) continue;
      if (route.methods === null || route.methods.has(verb)) {
        // A later rule without routes may allow the request too: it is the one that decides
        // whether headers that rewrite the method or path may go (routeOverrideRefusal).
        restricted ??= rule;
        break;
      }
      if (closeness < 3) {
        closeness = 3;
        reason = `method ${verb} is not allowed for ${JSON.stringify(url.pathname)} on host ${JSON.stringify(host)} (rule ${describe(rule.source)})`;
      }
    }
    if (restricted === rule) continue;
    if (closeness < 2) {
      closeness = 2;
      reason = `path ${JSON.stringify(url.pathname)} is not allowed on host ${JSON.stringify(host)} (rule ${describe(rule.source)})`;
    }
  }
  return restricted ? { ok: true, rule: restricted } : { ok: false, reason };
}

/**
 * Request headers some servers and frameworks read as the request's real method or path (Express's
 * method-override, Google APIs, OData and ASP.NET for the method; IIS URL Rewrite and Symfony for
 * the path). A rule's routes judge the request line only: sent to such a server, these would run
 * a method or path the routes never allowed.
 */
const ROUTE_OVERRIDE_HEADERS = [
  "x-http-method-override",
  "x-http-method",
  "x-method-override",
  "x-original-url",
  "x-rewrite-url",
];

/**
 * Why `rule`, which allowed a request, refuses it with `headers` (lowercase names): a rule with
 * routes takes no header that can override the method or path. Undefined when it takes them all.
 */
export function routeOverrideRefusal(rule: CompiledRule, headers: readonly (readonly [string, string])[]): string | undefined {
  if (rule.routes === null) return undefined;
  for (const [name] of headers) {
    if (ROUTE_OVERRIDE_HEADERS.includes(name)) {
      return `header "${name}" can make a server run another method or path than the request's, and rule ${describe(rule.source)} allows only its routes`;
    }
  }
  return undefined;
}
