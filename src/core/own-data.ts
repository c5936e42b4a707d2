/** Entries an array in options may hold (rules, origins, hosts): more is a mistake, not a policy. */
const MAX_OPTION_ENTRIES = 100_000;

/**
 * A deep copy of option data: plain objects (into objects with no prototype) and arrays, own
 * properties only, each read once; anything else (a string, a function) as it is. A rule read
 * from the caller's object could inherit a field from a polluted Object.prototype
 * (`internalOrigins` exempting an address from egress checks) and be read again at every run.
 */
export function ownData(value: unknown, where: string, depth = 0): unknown {
  if (value === null || typeof value !== "object") return value;
  if (depth > 8) throw new TypeError(`cordon: ${where} nests deeper than options do`);
  if (Array.isArray(value)) {
    const length = value.length;
    if (length > MAX_OPTION_ENTRIES) throw new TypeError(`cordon: ${where} has more than ${MAX_OPTION_ENTRIES} entries`);
    const copy: unknown[] = [];
    for (let i = 0; i < length; i++)
      copy.push(ownData(Object.hasOwn(value, i) ? value[i] : undefined, `${where}[${i}]`, depth + 1));
    return copy;
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return value;
  const copy: Record<string, unknown> = Object.create(null);
  for (const [key, entry] of Object.entries(value)) copy[key] = ownData(entry, `${where}.${key}`, depth + 1);
  return copy;
}
