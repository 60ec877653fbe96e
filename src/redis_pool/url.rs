//! A Redis URL that can only point at this machine: the lab sends nothing off the machine, so
//! the address is checked once, before any process or socket exists, and a refusal names what
//! is wrong with it.
//!
//! Parsed by hand rather than with the `url` crate (already in the build through `redis`):
//! for a scheme it does not know, `url` keeps the host as opaque text, so every loopback and
//! port check below, and every message naming what is refused, would remain; it would save
//! only the split of `HOST:PORT`, and it accepts forms (percent-escapes, empty ports) that
//! would each need a refusal of their own.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use anyhow::{Context, bail};

use crate::policy::digits_only;

/// A `redis://HOST:PORT` address whose host is a loopback address.
///
/// Accepted hosts: any IPv4 address in `127.0.0.0/8`, `[::1]`, and `localhost`, which is taken
/// to mean `127.0.0.1` without asking a resolver (a hosts file could map the name elsewhere).
/// The port is required and not 0. Refused: other schemes (`rediss://` would need TLS,
/// `unix://` is not TCP), user names and passwords, a database path (`/0`), a query or a
/// fragment: the lab namespaces its keys by run, on database 0; the password of its own private
/// server is given apart from the URL, never in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopbackUrl {
    addr: SocketAddr,
}

impl LoopbackUrl {
    /// Parses `s`, or says what is wrong with it: the URL as given, then why (`{:#}` shows
    /// both).
    pub(crate) fn parse(s: &str) -> anyhow::Result<LoopbackUrl> {
        let Some((scheme, rest)) = s.split_once("://") else {
            bail!("`{s}` is not a Redis URL: expected redis://127.0.0.1:PORT");
        };
        LoopbackUrl::from_parts(scheme, rest).with_context(|| format!("`{s}`"))
    }

    /// The URL `scheme://rest`, or why it is refused.
    fn from_parts(scheme: &str, rest: &str) -> anyhow::Result<LoopbackUrl> {
        if !scheme.eq_ignore_ascii_case("redis") {
            let why = if scheme.eq_ignore_ascii_case("rediss") {
                "TLS (rediss://) is not supported: the lab's Redis is on this machine"
            } else {
                "only redis:// is supported"
            };
            bail!("scheme `{scheme}` refused: {why}");
        }
        if let Some(at) = rest.find(['?', '#']) {
            bail!(
                "`{}` refused: a Redis URL here takes no query or fragment",
                &rest[at..]
            );
        }
        let (authority, path) = match rest.find('/') {
            Some(slash) => rest.split_at(slash),
            None => (rest, ""),
        };
        if authority.is_empty() && path.len() > 1 {
            bail!(
                "no host, only the path `{path}`: a Unix socket is not supported; expected \
                 redis://127.0.0.1:PORT"
            );
        }
        if !path.is_empty() && path != "/" {
            bail!(
                "database path `{path}` refused: the lab uses database 0 and namespaces its \
                 keys by run"
            );
        }
        if authority.contains('@') {
            bail!(
                "a user name or password is not supported: a Redis named here is used without \
                 authentication (`--global local` starts a private one with a password of its own)"
            );
        }
        let (host, port) = split_host_port(authority)?;
        let ip = loopback_ip(host)?;
        // The host first: a port is asked for only of an address the lab would use.
        let Some(port) = port else {
            bail!("a port is required, as in redis://{authority}:6379");
        };
        // Digits only, as every number the command line takes (`u16`'s parser takes a `+`).
        let port = match digits_only::<u16>(port) {
            Some(0) => bail!("port 0 is not a port to connect to"),
            Some(port) => port,
            None => bail!("port `{port}` is not a number from 1 to 65535"),
        };
        Ok(LoopbackUrl {
            addr: SocketAddr::new(ip, port),
        })
    }

    /// The address of a Redis server known to be local (one this process started).
    pub(crate) fn from_local(addr: SocketAddr) -> anyhow::Result<LoopbackUrl> {
        if !addr.ip().is_loopback() || addr.port() == 0 {
            bail!("{addr} is not a loopback address with a port");
        }
        Ok(LoopbackUrl { addr })
    }

    /// The socket address to connect to.
    pub(crate) fn socket_addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Splits `HOST:PORT` or `[V6]:PORT`; `None` for a missing port.
fn split_host_port(authority: &str) -> anyhow::Result<(&str, Option<&str>)> {
    if authority.is_empty() {
        bail!("no host: expected redis://127.0.0.1:PORT");
    }
    if let Some(bracketed) = authority.strip_prefix('[') {
        let Some((host, after)) = bracketed.split_once(']') else {
            bail!("an IPv6 host opened with `[` is not closed with `]`");
        };
        return match after.strip_prefix(':') {
            Some(port) => Ok((host, (!port.is_empty()).then_some(port))),
            None if after.is_empty() => Ok((host, None)),
            None => bail!("`{after}` after the IPv6 host is not `:PORT`"),
        };
    }
    match authority.rsplit_once(':') {
        Some((host, _)) if host.contains(':') => {
            bail!("an IPv6 host must be written in brackets, as in redis://[::1]:6379")
        }
        Some(("", _)) => bail!("no host: expected redis://127.0.0.1:PORT"),
        Some((host, port)) => Ok((host, (!port.is_empty()).then_some(port))),
        None => Ok((authority, None)),
    }
}

/// The loopback address `host` names, or why it is refused.
fn loopback_ip(host: &str) -> anyhow::Result<IpAddr> {
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    let ip = if let Ok(v4) = host.parse::<Ipv4Addr>() {
        IpAddr::V4(v4)
    } else if let Ok(v6) = host.parse::<Ipv6Addr>() {
        IpAddr::V6(v6)
    } else {
        bail!(
            "host `{host}` refused: only loopback addresses (127.0.0.0/8, [::1], localhost), \
             the lab sends nothing off this machine"
        );
    };
    if !ip.is_loopback() {
        bail!("host `{host}` is not a loopback address: the lab sends nothing off this machine");
    }
    Ok(ip)
}

impl fmt::Display for LoopbackUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SocketAddr prints IPv6 in brackets, as a URL needs.
        write!(f, "redis://{}", self.addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> String {
        match LoopbackUrl::parse(s) {
            Ok(url) => url.to_string(),
            Err(why) => panic!("expected {s} to parse, got: {why:#}"),
        }
    }

    fn refused(s: &str, names: &str) {
        match LoopbackUrl::parse(s) {
            Ok(url) => panic!("expected {s} to be refused, got {url}"),
            Err(why) => assert!(
                format!("{why:#}").contains(names),
                "refusal of {s} should mention `{names}`, got: {why:#}"
            ),
        }
    }

    /// Loopback hosts are accepted and printed back in one normal form.
    #[test]
    fn accepts_loopback_hosts() {
        assert_eq!(ok("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(ok("redis://127.0.0.1:6379/"), "redis://127.0.0.1:6379");
        assert_eq!(ok("REDIS://127.0.0.1:1"), "redis://127.0.0.1:1");
        assert_eq!(ok("redis://127.1.2.3:65535"), "redis://127.1.2.3:65535");
        assert_eq!(ok("redis://localhost:7000"), "redis://127.0.0.1:7000");
        assert_eq!(ok("redis://LocalHost:7000"), "redis://127.0.0.1:7000");
        assert_eq!(ok("redis://[::1]:7000"), "redis://[::1]:7000");
        assert_eq!(
            LoopbackUrl::parse("redis://[::1]:7000")
                .map(|u| u.socket_addr())
                .ok(),
            Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 7000))
        );
    }

    /// Anything that could leave the machine is refused, naming the host.
    #[test]
    fn refuses_other_hosts() {
        refused("redis://10.0.0.1:6379", "not a loopback");
        // A host off the machine is refused as such, and no other address is suggested.
        for off in [
            "redis://10.0.0.1",
            "redis://10.0.0.1:",
            "redis://example.com",
        ] {
            let why = format!("{:#}", LoopbackUrl::parse(off).expect_err("refused"));
            assert!(!why.contains("as in"), "{off}: {why}");
        }
        refused("redis://192.168.1.2:6379", "not a loopback");
        refused("redis://0.0.0.0:6379", "not a loopback");
        refused("redis://[::]:6379", "not a loopback");
        refused("redis://[::ffff:127.0.0.1]:6379", "not a loopback");
        refused("redis://example.com:6379", "host `example.com` refused");
        refused("redis://127.0.0.1.example.com:6379", "refused");
        refused("redis://127.0.0.1.evil.com:6379", "refused");
        refused("redis://[::ffff:10.0.0.1]:6379", "not a loopback");
        refused("redis://[::127.0.0.1]:6379", "not a loopback");
        refused("redis://[::1%lo]:6379", "refused");
        refused("redis://user@127.0.0.1:6379", "user name");
        refused("redis://127.0.0.1:6379@10.0.0.1:6379", "user name");
        refused("redis://10.0.0.1/@127.0.0.1:6379", "database path");
        // Digits other than ASCII ones, in the host or the port.
        refused("redis://\u{ff11}27.0.0.1:6379", "refused");
        refused("redis://127.0.0.1:\u{0666}379", "not a number");
        refused("redis://127.0.0.1:+6379", "port `+6379` is not a number");
        refused("redis://0177.0.0.1:6379", "refused");
        refused("redis://2130706433:6379", "refused");
    }

    /// Malformed URLs and unsupported parts are refused with a message naming the part.
    #[test]
    fn refuses_malformed_and_unsupported() {
        refused("", "not a Redis URL");
        refused("127.0.0.1:6379", "not a Redis URL");
        refused("http://127.0.0.1:6379", "scheme `http`");
        refused("rediss://127.0.0.1:6379", "TLS");
        refused("unix:///tmp/redis.sock", "scheme `unix`");
        refused("redis://127.0.0.1", "port is required");
        refused("redis://127.0.0.1:", "port is required");
        refused("redis://[::1]", "port is required");
        refused("redis://[::1]x", "not `:PORT`");
        refused("redis:///tmp/redis.sock", "Unix socket");
        refused("redis://[::1:6379", "not closed");
        refused("redis://::1:6379", "brackets");
        refused("redis://:6379", "no host");
        refused("redis://", "no host");
        refused("redis://127.0.0.1:0", "port 0");
        refused("redis://127.0.0.1:65536", "port `65536`");
        refused("redis://127.0.0.1:http", "port `http`");
        refused("redis://127.0.0.1:-1", "port `-1`");
        refused("redis://user:secret@127.0.0.1:6379", "password");
        refused("redis://:secret@127.0.0.1:6379", "password");
        refused("redis://127.0.0.1:6379/0", "database path `/0`");
        refused("redis://127.0.0.1:6379/1", "database path");
        refused("redis://127.0.0.1:6379?protocol=3", "query");
        refused("redis://127.0.0.1:6379#x", "fragment");
    }

    /// Only a loopback address with a port can be built from a local server's address.
    #[test]
    fn from_local_checks_loopback() {
        let local = SocketAddr::from(([127, 0, 0, 1], 6380));
        assert_eq!(
            LoopbackUrl::from_local(local).map(|u| u.to_string()).ok(),
            Some("redis://127.0.0.1:6380".to_owned())
        );
        assert!(LoopbackUrl::from_local(SocketAddr::from(([10, 0, 0, 1], 6380))).is_err());
        assert!(LoopbackUrl::from_local(SocketAddr::from(([127, 0, 0, 1], 0))).is_err());
    }
}
