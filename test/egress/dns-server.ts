import dgram from "node:dgram";
import { once } from "node:events";

export interface Zone {
  A?: string[];
  AAAA?: string[];
  /** Answer every query for the name with this DNS rcode (2 SERVFAIL, 3 NXDOMAIN). */
  rcode?: number;
  /** Only for this query type. */
  rcodeFor?: "A" | "AAAA";
  /** Never answer. */
  silent?: boolean;
}

/** A tiny authoritative DNS responder on 127.0.0.1 (UDP, A and AAAA only), for the real c-ares path. */
export async function dnsServer(zones: Record<string, Zone>) {
  const socket = dgram.createSocket("udp4");
  const queries: string[] = [];
  socket.on("message", (query, peer) => {
    let offset = 12;
    const labels: string[] = [];
    while (query[offset] !== 0) {
      labels.push(query.subarray(offset + 1, offset + 1 + query[offset]).toString());
      offset += query[offset] + 1;
    }
    const questionEnd = offset + 5;
    const qtype = query.readUInt16BE(offset + 1) === 28 ? "AAAA" : "A";
    const name = labels.join(".").toLowerCase();
    queries.push(`${qtype} ${name}`);
    const zone = zones[name];
    if (zone?.silent) return;
    const rcode = zone === undefined ? 3 : zone.rcode !== undefined && (zone.rcodeFor ?? qtype) === qtype ? zone.rcode : 0;
    const records = rcode === 0 ? (zone?.[qtype] ?? []) : [];
    const header = Buffer.alloc(12);
    header.writeUInt16BE(query.readUInt16BE(0), 0);
    header.writeUInt16BE(0x8180 | rcode, 2);
    header.writeUInt16BE(1, 4);
    header.writeUInt16BE(records.length, 6);
    const answers = records.map((address) => {
      const rdata = qtype === "A" ? Buffer.from(address.split(".").map(Number)) : ipv6Bytes(address);
      const answer = Buffer.alloc(12);
      answer.writeUInt16BE(0xc00c, 0);
      answer.writeUInt16BE(qtype === "A" ? 1 : 28, 2);
      answer.writeUInt16BE(1, 4);
      answer.writeUInt32BE(60, 6);
      answer.writeUInt16BE(rdata.length, 10);
      return Buffer.concat([answer, rdata]);
    });
    socket.send(Buffer.concat([header, query.subarray(12, questionEnd), ...answers]), peer.port, peer.address);
  });
  socket.bind(0, "127.0.0.1");
  await once(socket, "listening");
  return { server: `127.0.0.1:${socket.address().port}`, queries, close: () => socket.close() };
}

function ipv6Bytes(address: string): Buffer {
  const [head, tail = ""] = address.split("::");
  const parts = (text: string) => (text === "" ? [] : text.split(":").map((part) => Number.parseInt(part, 16)));
  const left = parts(head);
  const right = parts(tail);
  const all = [...left, ...new Array(8 - left.length - right.length).fill(0), ...right];
  const bytes = Buffer.alloc(16);
  for (const [i, part] of all.entries()) bytes.writeUInt16BE(part, i * 2);
  return bytes;
}
