import { type CompiledRule, compileRules, type HostPattern, hostMatches, type NetRule } from "./rules.js";

function hostCovered(ceiling: HostPattern, tenant: HostPattern): boolean {
  if (ceiling.kind === "any") return true;
  if (tenant.kind === "any") return false;
  if (tenant.kind === "exact") return hostMatches(ceiling, tenant.host);
  // A tenant wildcard is covered by the same wildcard or a wider one, never by an exact host.
  return ceiling.kind === "subdomains" && (tenant.of === ceiling.of || tenant.of.endsWith(`.${ceiling.of}`));
}

// Ports must be the same: a port-less rule means "the scheme's default port", so it covers
// neither `host:443` (which would also admit http on 443) nor the reverse.
function covered(ceiling: readonly CompiledRule[], tenant: CompiledRule): boolean {
  return ceiling.some((c) => c.port === tenant.port && hostCovered(c.host, tenant.host));
}

/**
 * Narrow a tenant's net rules by the deployment's ceiling. The result never allows what the
 * ceiling does not.
 *
 * `tenant`:
 * - `null`: the tenant chose nothing; the ceiling stands.
 * - `[]`: nothing.
 * - `["*"]` (the bare string `"*"` anywhere in the list): the whole ceiling.
 * - other entries are kept when one ceiling entry covers all they match (same port; an exact
 *   host, or a subdomain of a ceiling wildcard, or a narrower wildcard) and dropped otherwise.
 *   Routes only narrow an entry further, so they are kept as written.
 *
 * `ceiling`:
 * - a list of string rules (`"api.example.com"`, `"*.cdn.io"`, `"host:port"`, `"*"`).
 * - `null` means NO CEILING: the tenant's list is used as is (and `null` with `null` is `[]`).
 *   Pass `null` only where the deployment deliberately sets no limit; a missing setting is
 *   `undefined`, which is refused with a TypeError rather than read as "anything".
 *
 * Both lists are validated; a bad entry throws a TypeError that names it.
 */
export function narrowAllowList(ceiling: readonly string[] | null, tenant: readonly NetRule[] | null): NetRule[] {
  if (ceiling === undefined) throw new TypeError("the ceiling is undefined: pass null to say there is no ceiling");
  if (tenant === undefined) throw new TypeError("the tenant rules are undefined: pass null to say the tenant chose none");
  if (ceiling !== null) {
    if (!Array.isArray(ceiling) || ceiling.some((entry) => typeof entry !== "string")) {
      throw new TypeError("the ceiling must be an array of string rules");
    }
  }
  const ceilingRules = ceiling === null ? null : compileRules(ceiling, "ceiling").compiled;
  const tenantRules = tenant === null ? null : compileRules(tenant, "tenant").compiled;
  if (ceilingRules === null) return tenantRules === null ? [] : tenantRules.map((rule) => rule.source);
  if (tenantRules === null) return [...(ceiling as string[])];
  const result: NetRule[] = [];
  for (const rule of tenantRules) {
    if (rule.source === "*") result.push(...(ceiling as string[]));
    else if (covered(ceilingRules, rule)) result.push(rule.source);
  }
  return [...new Set(result)];
}
