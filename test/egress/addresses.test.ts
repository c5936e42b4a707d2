import { describe, expect, it } from "vitest";
import { canonicalAddress, classifyAddress } from "../../src/egress/index.js";

// Teredo 2001:0:SSSS:SSSS:flags:port:~CCCC:~CCCC (server 65.54.227.120 is public).
const teredo = (client: string) => `2001:0:4136:e378:8000:63bf:${client}`;

describe("classifyAddress", () => {
  it.each([
    // public
    ["8.8.8.8", "public"],
    ["1.1.1.1", "public"],
    ["172.32.0.1", "public"],
    ["100.128.0.1", "public"],
    ["2606:4700:4700::1111", "public"],
    ["::ffff:8.8.8.8", "public"],
    ["64:ff9b::8.8.8.8", "public"],
    ["2002:808:808::1", "public"],
    [teredo("f7f7:f7f7"), "public"],
    // IPv4 special-purpose registry
    ["0.0.0.0", "unspecified"],
    ["0.1.2.3", "unspecified"],
    ["10.1.2.3", "private"],
    ["172.16.0.1", "private"],
    ["172.31.255.255", "private"],
    ["192.168.1.1", "private"],
    ["100.64.0.1", "cgnat"],
    ["100.127.255.255", "cgnat"],
    ["127.0.0.1", "loopback"],
    ["127.255.255.254", "loopback"],
    ["169.254.1.1", "link-local"],
    ["192.0.0.9", "reserved"],
    ["192.0.2.1", "documentation"],
    ["198.51.100.1", "documentation"],
    ["203.0.113.1", "documentation"],
    ["192.31.196.1", "reserved"],
    ["192.52.193.1", "reserved"],
    ["192.88.99.1", "reserved"],
    ["192.175.48.1", "reserved"],
    ["198.18.0.1", "benchmarking"],
    ["198.19.255.255", "benchmarking"],
    ["224.0.0.1", "multicast"],
    ["239.255.255.250", "multicast"],
    ["240.0.0.1", "reserved"],
    ["255.255.255.255", "broadcast"],
    // metadata services
    ["169.254.169.254", "metadata"],
    ["169.254.170.2", "metadata"],
    ["100.100.100.200", "metadata"],
    ["168.63.129.16", "metadata"],
    ["fd00:ec2::254", "metadata"],
    ["fd00:ec2:0:0:0:0:0:254", "metadata"],
    // legacy IPv4 text, read as WHATWG URL reads it
    ["2130706433", "loopback"],
    ["0177.0.0.1", "loopback"],
    ["0x7f.0x0.0x0.0x1", "loopback"],
    ["0x7f000001", "loopback"],
    ["127.1", "loopback"],
    ["2852039166", "metadata"],
    ["0xa9fea9fe", "metadata"],
    ["0251.0376.0251.0376", "metadata"],
    ["169.254.43518", "metadata"],
    // IPv6 special-purpose registry
    ["::", "unspecified"],
    ["::1", "loopback"],
    ["[::1]", "loopback"],
    ["0:0:0:0:0:0:0:1", "loopback"],
    ["fe80::1", "link-local"],
    ["fe80::1%eth0", "link-local"],
    ["fc00::1", "unique-local"],
    ["fd12:3456::1", "unique-local"],
    ["fec0::1", "site-local"],
    ["ff02::1", "multicast"],
    ["100::1", "discard"],
    ["100:0:0:1::1", "reserved"],
    ["2001:db8::1", "documentation"],
    ["3fff::1", "documentation"],
    ["2001:2::1", "benchmarking"],
    ["2001:10::1", "reserved"],
    ["2001:1::1", "reserved"],
    ["2620:4f:8000::1", "reserved"],
    ["5f00::1", "reserved"],
    ["4000::1", "reserved"],
    ["::ffff:0:127.0.0.1", "reserved"],
    ["64:ff9b:1::1", "nat64"],
    // v6 forms that embed a v4 address are judged by it
    ["::ffff:127.0.0.1", "ipv4-mapped:loopback"],
    ["::FFFF:7F00:1", "ipv4-mapped:loopback"],
    ["::ffff:169.254.169.254", "ipv4-mapped:metadata"],
    ["::ffff:10.0.0.1", "ipv4-mapped:private"],
    ["::127.0.0.1", "ipv4-compatible:loopback"],
    ["::8.8.8.8", "ipv4-compatible"],
    ["::2", "ipv4-compatible:unspecified"],
    ["64:ff9b::7f00:1", "nat64:loopback"],
    ["64:ff9b::127.0.0.1", "nat64:loopback"],
    ["64:ff9b::a9fe:a9fe", "nat64:metadata"],
    ["64:ff9b::a00:1", "nat64:private"],
    ["2002:7f00:1::", "6to4:loopback"],
    ["2002:a9fe:a9fe::1", "6to4:metadata"],
    ["2002:c0a8:101::1", "6to4:private"],
    [teredo("80ff:fffe"), "teredo:loopback"],
    ["2001:0:a00:1:8000:63bf:f7f7:f7f7", "teredo:private"],
    // not addresses
    ["example.com", "invalid"],
    ["", "invalid"],
    ["1.2.3.4.5", "invalid"],
    ["12345678901", "invalid"],
    ["127.0.0.1 ", "invalid"],
    ["127.0.0.1/8", "invalid"],
    ["::g", "invalid"],
    ["1::2::3", "invalid"],
    ["::ffff:0177.0.0.1", "invalid"],
  ])("%s is %s", (address, expected) => {
    expect(classifyAddress(address)).toBe(expected);
  });
});

describe("canonicalAddress", () => {
  it.each([
    ["0x7f.1", { address: "127.0.0.1", family: 4 }],
    ["2852039166", { address: "169.254.169.254", family: 4 }],
    ["[0:0:0:0:0:0:0:1]", { address: "::1", family: 6 }],
    ["FE80::1%eth0", { address: "fe80::1", family: 6 }],
    ["2001:DB8:0:0:1:0:0:1", { address: "2001:db8::1:0:0:1", family: 6 }],
    ["host.test", null],
  ])("%s", (text, expected) => {
    expect(canonicalAddress(text)).toEqual(expected);
  });
});
