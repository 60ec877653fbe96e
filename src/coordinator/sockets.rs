//! What the kernel holds for the front's port, read from `/proc/net/tcp`: connections waiting
//! in the listener's accept queue, and connections whose request bytes nobody has read. When
//! every worker of the front's runtime is blocked, a request sent to it arrives and sits there:
//! this is how the lab sees it, instead of waiting and guessing (`docs/blocking.md`).

pub use crate::evidence::Queues;

/// `/proc/net/tcp`'s state of a listening socket.
const LISTEN: &str = "0A";
/// `/proc/net/tcp`'s state of an established connection.
const ESTABLISHED: &str = "01";

/// The queues of the IPv4 listener on `port`, from the text of `/proc/net/tcp`. Only sockets
/// whose local port is `port` are the server's: the client's ends have it as their remote port.
pub(crate) fn parse(table: &str, port: u16) -> Queues {
    let local = format!(":{port:04X}");
    let mut queues = Queues::default();
    for line in table.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, address, _, state, queued, ..] = fields[..] else {
            continue;
        };
        if !address.ends_with(&local) {
            continue;
        }
        // `tx_queue:rx_queue`, in hex.
        let received = queued
            .split_once(':')
            .and_then(|(_, rx)| usize::from_str_radix(rx, 16).ok())
            .unwrap_or(0);
        match state {
            LISTEN => queues.accept_queue += received,
            ESTABLISHED if received > 0 => {
                queues.unread_connections += 1;
                queues.unread_bytes += received;
            }
            _ => {}
        }
    }
    queues
}

/// The queues of the listener on `port` now.
pub(crate) fn read(port: u16) -> std::io::Result<Queues> {
    Ok(parse(&std::fs::read_to_string("/proc/net/tcp")?, port))
}

/// Waits until at least `connections` of the server's connections on `port` hold unread
/// request bytes, re-reading the table and yielding to the run's other tasks (the callers that
/// send) between reads; the caller bounds the wait with the safety timeout.
pub(crate) async fn unread(port: u16, connections: usize) -> std::io::Result<Queues> {
    loop {
        let queues = read(port)?;
        if queues.unread_connections >= connections {
            return Ok(queues);
        }
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as a real machine wrote them: a listener on 0xD2FD with one connection queued,
    /// the client's end, and the server's end holding 22 unread bytes; another port's socket.
    #[test]
    fn the_servers_queues_are_read_off_its_port() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:D2FD 00000000:0000 0A 00000000:00000001 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0100007F:9EFE 0100007F:D2FD 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1
   2: 0100007F:D2FD 0100007F:9EFE 01 00000000:00000016 00:00000000 00000000     0        0 3 1 0 20 4 30 10 -1
   3: 0100007F:1F90 0100007F:9EFF 01 00000000:00000040 00:00000000 00000000     0        0 4 1 0 20 4 30 10 -1
";
        let queues = parse(table, 0xD2FD);
        let expected = Queues {
            accept_queue: 1,
            unread_connections: 1,
            unread_bytes: 22,
        };
        assert_eq!(queues, expected);
        assert_eq!(parse(table, 0x1234), Queues::default());
        assert_eq!(parse("", 0xD2FD), Queues::default());
    }
}
