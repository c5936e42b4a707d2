import type { Server } from "node:http";
import type { Socket } from "node:net";
import ipaddr from "ipaddr.js";
import type { Logger } from "pino";

export { requestTimeouts } from "../core/http-timeouts.js";

/** Connections refused at a cap are logged at most this often (a flood is one line, with its count). */
const DROP_LOG_EVERY_MS = 10_000;

/**
 * The connection caps: `maxConnections` in all (each holds a file descriptor), and at most
 * `perAddress` from one client address, so one peer (without the secret: connecting is enough)
 * cannot take every connection and lock the others out. IPv6 addresses count by their /64, the
 * block one host is usually given; an IPv4-mapped address counts as its IPv4 address.
 * Past either cap a new connection is closed at once, and logged.
 */
export function limitConnections(server: Server, caps: { maxConnections: number; perAddress: number }, logger: Logger): void {
  server.maxConnections = caps.maxConnections;
  const logFull = rateLimited((dropped) =>
    logger.warn(
      { event: "connections-full", maxConnections: caps.maxConnections, dropped },
      "connection refused: at maxConnections",
    ),
  );
  const logAddressFull = rateLimited((dropped, address) =>
    logger.warn(
      { event: "connections-per-address-full", maxConnectionsPerAddress: caps.perAddress, address, dropped },
      "connection refused: its address is at maxConnectionsPerAddress",
    ),
  );
  server.on("drop", () => logFull());
  const open = new Map<string, number>();
  server.on("connection", (socket: Socket) => {
    const key = addressKey(socket.remoteAddress);
    const count = open.get(key) ?? 0;
    if (count >= caps.perAddress) {
      socket.destroy();
      logAddressFull(key);
      return;
    }
    open.set(key, count + 1);
    socket.once("close", () => {
      const left = (open.get(key) ?? 1) - 1;
      if (left === 0) open.delete(key);
      else open.set(key, left);
    });
  });
}

/** The key one client's connections count under: its IPv4 address, or its IPv6 /64. */
export function addressKey(address: string | undefined): string {
  if (address === undefined || !ipaddr.isValid(address)) return String(address);
  const parsed = ipaddr.process(address);
  if (parsed.kind() === "ipv4") return parsed.toString();
  const parts = (parsed as ipaddr.IPv6).parts.slice(0, 4);
  return `${parts.map((part) => part.toString(16)).join(":")}::/64`;
}

/** A log call made at most once per DROP_LOG_EVERY_MS, with the count of every call. */
function rateLimited(log: (dropped: number, detail?: string) => void): (detail?: string) => void {
  let dropped = 0;
  let loggedAt: number | undefined;
  return (detail) => {
    dropped++;
    if (loggedAt !== undefined && performance.now() - loggedAt < DROP_LOG_EVERY_MS) return;
    loggedAt = performance.now();
    log(dropped, detail);
  };
}
