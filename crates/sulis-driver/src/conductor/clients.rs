//! Client sessions: the heartbeat counter that keeps a client alive, the
//! counters clients add and remove, and releasing all a client holds when
//! it closes or times out.

use super::subscriptions::SubscriptionLink;
use super::{CommandError, DriverConductor};
use crate::system_counters::type_id;
use sulis_protocol::control::{error_code, Event};

pub(super) struct ClientSession {
    pub(super) client_id: i64,
    pub(super) heartbeat_counter_id: i32,
    closed: bool,
}

pub(super) struct ClientCounter {
    registration_id: i64,
    client_id: i64,
    counter_id: i32,
}

impl DriverConductor {
    pub(super) fn ensure_client(&mut self, client_id: i64) {
        if self.clients.iter().any(|c| c.client_id == client_id) {
            return;
        }
        let now_ms = self.clock.epoch_ms();
        let label = format!("client-heartbeat: id={client_id}");
        match self.counters.allocate(
            type_id::CLIENT_HEARTBEAT,
            &client_id.to_le_bytes(),
            &label,
            client_id,
            client_id,
            0,
            now_ms,
        ) {
            Ok(id) => {
                self.counters.set_counter_value(id, now_ms);
                self.clients.push(ClientSession {
                    client_id,
                    heartbeat_counter_id: id,
                    closed: false,
                });
                self.send(Event::CounterReady {
                    correlation_id: client_id,
                    counter_id: id,
                });
            }
            Err(e) => self.record_error(&format!(
                "cannot allocate heartbeat counter for client {client_id}: {e}"
            )),
        }
    }

    pub(super) fn on_add_counter(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        counter_type: i32,
        key: &[u8],
        label: &str,
    ) -> Result<(), CommandError> {
        let id = self
            .counters
            .allocate(
                counter_type,
                key,
                label,
                correlation_id,
                client_id,
                0,
                self.clock.epoch_ms(),
            )
            .map_err(|e| CommandError::new(error_code::GENERIC_ERROR, e))?;
        self.client_counters.push(ClientCounter {
            registration_id: correlation_id,
            client_id,
            counter_id: id,
        });
        self.send(Event::CounterReady {
            correlation_id,
            counter_id: id,
        });
        Ok(())
    }

    pub(super) fn on_remove_counter(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
    ) -> Result<(), CommandError> {
        let i = self
            .client_counters
            .iter()
            .position(|c| c.registration_id == registration_id && c.client_id == client_id)
            .ok_or_else(|| {
                CommandError::new(
                    error_code::UNKNOWN_COUNTER,
                    format!("unknown counter {registration_id}"),
                )
            })?;
        let c = self.client_counters.swap_remove(i);
        self.counters.free(c.counter_id, self.clock.epoch_ms());
        self.send(Event::OperationSuccess { correlation_id });
        self.send(Event::UnavailableCounter {
            registration_id,
            counter_id: c.counter_id,
        });
        Ok(())
    }

    /// Releases everything a client holds (close or time-out).
    pub(super) fn release_client(&mut self, client_id: i64, now_ns: i64) {
        self.deferred_subscriptions
            .retain(|d| d.client_id != client_id);
        let links: Vec<i64> = self
            .publication_links
            .iter()
            .filter(|l| l.client_id == client_id)
            .map(|l| l.publication_id)
            .collect();
        self.publication_links.retain(|l| l.client_id != client_id);
        for pid in links {
            self.release_publication_link(pid, now_ns);
        }
        let (subs, rest): (Vec<SubscriptionLink>, Vec<SubscriptionLink>) =
            std::mem::take(&mut self.subscriptions)
                .into_iter()
                .partition(|s| s.client_id == client_id);
        self.subscriptions = rest;
        for s in &subs {
            self.unlink_subscription(s);
        }
        let now_ms = self.clock.epoch_ms();
        let counters: Vec<ClientCounter> = {
            let (mine, rest) = std::mem::take(&mut self.client_counters)
                .into_iter()
                .partition(|c| c.client_id == client_id);
            self.client_counters = rest;
            mine
        };
        for c in counters {
            self.counters.free(c.counter_id, now_ms);
            self.send(Event::UnavailableCounter {
                registration_id: c.registration_id,
                counter_id: c.counter_id,
            });
        }
        if let Some(i) = self.clients.iter().position(|c| c.client_id == client_id) {
            let c = self.clients.swap_remove(i);
            self.counters.free(c.heartbeat_counter_id, now_ms);
            let _ = c.closed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{command_error, TestConductor};
    use super::*;

    #[test]
    fn should_give_a_client_one_heartbeat_counter() {
        let mut t = TestConductor::new("client-heartbeat");
        let c = &mut t.conductor;
        c.ensure_client(5);
        c.ensure_client(5);
        assert_eq!(c.clients.len(), 1);
        let id = c.clients[0].heartbeat_counter_id;
        assert_eq!(
            c.counters.reader().counter_value(id),
            c.clock.epoch_ms(),
            "the heartbeat starts at the time the client appeared"
        );
        c.release_client(5, 0);
        assert!(c.clients.is_empty());
    }

    #[test]
    fn should_refuse_to_remove_a_counter_of_another_client() {
        let mut t = TestConductor::new("client-counters");
        let c = &mut t.conductor;
        c.ensure_client(5);
        c.ensure_client(6);
        c.on_add_counter(5, 100, 1001, b"key", "label")
            .unwrap_or_else(|e| panic!("{}", e.message));
        let e = command_error(c.on_remove_counter(6, 101, 100));
        assert_eq!(e.code, error_code::UNKNOWN_COUNTER);
        assert_eq!(e.message, "unknown counter 100");
        c.on_remove_counter(5, 102, 100)
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert!(c.client_counters.is_empty());
    }
}
