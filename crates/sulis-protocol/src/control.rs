//! Client → driver commands and driver → client events.
//!
//! Type ids and layouts are Aeron's (docs/protocol.md §4.8–4.9). Every command
//! starts with `client_id i64 @0, correlation_id i64 @8`; strings are an `i32`
//! length followed by the bytes. Decoding checks every length against the
//! message, so a malformed message yields an error, never a panic.

/// Command type ids (to-driver ring buffer).
pub mod command_type {
    /// Add a concurrent publication.
    pub const ADD_PUBLICATION: i32 = 0x01;
    /// Remove a publication.
    pub const REMOVE_PUBLICATION: i32 = 0x02;
    /// Add an exclusive publication.
    pub const ADD_EXCLUSIVE_PUBLICATION: i32 = 0x03;
    /// Add a subscription.
    pub const ADD_SUBSCRIPTION: i32 = 0x04;
    /// Remove a subscription.
    pub const REMOVE_SUBSCRIPTION: i32 = 0x05;
    /// Legacy keepalive.
    pub const CLIENT_KEEPALIVE: i32 = 0x06;
    /// Add a counter.
    pub const ADD_COUNTER: i32 = 0x09;
    /// Remove a counter.
    pub const REMOVE_COUNTER: i32 = 0x0A;
    /// Client is closing.
    pub const CLIENT_CLOSE: i32 = 0x0B;
    /// Ask the driver to terminate.
    pub const TERMINATE_DRIVER: i32 = 0x0E;
    /// Add a destination to a manual MDC publication.
    pub const ADD_DESTINATION: i32 = 0x07;
    /// Remove a destination from a manual MDC publication.
    pub const REMOVE_DESTINATION: i32 = 0x08;
    /// Add a destination to a multi-destination subscription.
    pub const ADD_RCV_DESTINATION: i32 = 0x0C;
    /// Remove a destination from a multi-destination subscription.
    pub const REMOVE_RCV_DESTINATION: i32 = 0x0D;
    /// Remove a destination by its registration id.
    pub const REMOVE_DESTINATION_BY_ID: i32 = 0x11;
    /// Ask for the session id the next publication on a stream would get
    /// (Aeron 1.49's `Aeron.nextSessionId(streamId)`).
    pub const GET_NEXT_AVAILABLE_SESSION_ID: i32 = 0x12;

    // Aeron's commands sulis does not implement (docs/protocol.md §4.8).

    /// Add a static counter.
    pub const ADD_STATIC_COUNTER: i32 = 0x0F;
    /// Reject an image.
    pub const REJECT_IMAGE: i32 = 0x10;

    /// The name of one of Aeron's command types this protocol has no
    /// decoder for; `None` for the others (implemented, or not Aeron's).
    pub fn unimplemented_name(type_id: i32) -> Option<&'static str> {
        Some(match type_id {
            ADD_STATIC_COUNTER => "ADD_STATIC_COUNTER",
            REJECT_IMAGE => "REJECT_IMAGE",
            _ => return None,
        })
    }
}

/// `(client_id, correlation_id)`, the header every Aeron command starts with,
/// or `None` when `body` is too short to hold it.
pub fn correlated_header(body: &[u8]) -> Option<(i64, i64)> {
    let client_id = i64::from_le_bytes(body.get(0..8)?.try_into().ok()?);
    let correlation_id = i64::from_le_bytes(body.get(8..16)?.try_into().ok()?);
    Some((client_id, correlation_id))
}

/// Event type ids (to-clients broadcast buffer).
pub mod event_type {
    /// A command failed.
    pub const ON_ERROR: i32 = 0x0F01;
    /// An image became available to a subscription.
    pub const ON_AVAILABLE_IMAGE: i32 = 0x0F02;
    /// A concurrent publication is ready.
    pub const ON_PUBLICATION_READY: i32 = 0x0F03;
    /// A command succeeded.
    pub const ON_OPERATION_SUCCESS: i32 = 0x0F04;
    /// An image went away.
    pub const ON_UNAVAILABLE_IMAGE: i32 = 0x0F05;
    /// An exclusive publication is ready.
    pub const ON_EXCLUSIVE_PUBLICATION_READY: i32 = 0x0F06;
    /// A subscription is ready.
    pub const ON_SUBSCRIPTION_READY: i32 = 0x0F07;
    /// A counter is ready.
    pub const ON_COUNTER_READY: i32 = 0x0F08;
    /// A counter went away.
    pub const ON_UNAVAILABLE_COUNTER: i32 = 0x0F09;
    /// A client was timed out by the driver.
    pub const ON_CLIENT_TIMEOUT: i32 = 0x0F0A;
    /// The answer to GET_NEXT_AVAILABLE_SESSION_ID.
    pub const ON_NEXT_AVAILABLE_SESSION_ID: i32 = 0x0F0D;
}

/// Error codes carried by `ON_ERROR`.
pub mod error_code {
    /// The channel URI was rejected.
    pub const INVALID_CHANNEL: i32 = 1;
    /// No such subscription.
    pub const UNKNOWN_SUBSCRIPTION: i32 = 2;
    /// No such publication.
    pub const UNKNOWN_PUBLICATION: i32 = 3;
    /// The channel endpoint failed.
    pub const CHANNEL_ENDPOINT_ERROR: i32 = 4;
    /// No such counter.
    pub const UNKNOWN_COUNTER: i32 = 5;
    /// Command type not understood.
    pub const UNKNOWN_COMMAND_TYPE_ID: i32 = 6;
    /// Command could not be decoded.
    pub const MALFORMED_COMMAND: i32 = 7;
    /// Feature not supported.
    pub const NOT_SUPPORTED: i32 = 8;
    /// Host name not resolvable.
    pub const UNKNOWN_HOST: i32 = 9;
    /// Try again later.
    pub const RESOURCE_TEMPORARILY_UNAVAILABLE: i32 = 10;
    /// Anything else.
    pub const GENERIC_ERROR: i32 = 11;
    /// Not enough storage for a log buffer.
    pub const STORAGE_SPACE: i32 = 12;
}

/// A message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for DecodeError {}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, pos: 0, what }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() - self.pos < n {
            return Err(DecodeError(format!(
                "{}: truncated at byte {} (need {n} more, message is {} bytes)",
                self.what,
                self.pos,
                self.buf.len()
            )));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn string(&mut self) -> Result<String, DecodeError> {
        let n = self.i32()?;
        if n < 0 {
            return Err(DecodeError(format!(
                "{}: negative string length {n}",
                self.what
            )));
        }
        let bytes = self.take(n as usize)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| DecodeError(format!("{}: string is not UTF-8", self.what)))
    }
    fn align4(&mut self) {
        self.pos = (self.pos + 3) & !3;
        self.pos = self.pos.min(self.buf.len());
    }
}

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn i32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn string(mut self, s: &str) -> Self {
        self.0.extend_from_slice(&(s.len() as i32).to_le_bytes());
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn align4(mut self) -> Self {
        while !self.0.len().is_multiple_of(4) {
            self.0.push(0);
        }
        self
    }
}

/// A client → driver command.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// ADD_PUBLICATION / ADD_EXCLUSIVE_PUBLICATION.
    AddPublication {
        client_id: i64,
        correlation_id: i64,
        stream_id: i32,
        channel: String,
        exclusive: bool,
    },
    /// REMOVE_PUBLICATION.
    RemovePublication {
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
    },
    /// ADD_SUBSCRIPTION.
    AddSubscription {
        client_id: i64,
        correlation_id: i64,
        stream_id: i32,
        channel: String,
    },
    /// REMOVE_SUBSCRIPTION.
    RemoveSubscription {
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
    },
    /// ADD_COUNTER.
    AddCounter {
        client_id: i64,
        correlation_id: i64,
        type_id: i32,
        key: Vec<u8>,
        label: String,
    },
    /// REMOVE_COUNTER.
    RemoveCounter {
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
    },
    /// CLIENT_KEEPALIVE.
    ClientKeepalive { client_id: i64 },
    /// CLIENT_CLOSE.
    ClientClose { client_id: i64 },
    /// TERMINATE_DRIVER.
    TerminateDriver {
        client_id: i64,
        correlation_id: i64,
        token: Vec<u8>,
    },
    /// ADD_DESTINATION (`receive` false: to a manual MDC publication) or
    /// ADD_RCV_DESTINATION (`receive` true: to a multi-destination
    /// subscription). `registration_id` names the publication or subscription.
    AddDestination {
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
        channel: String,
        receive: bool,
    },
    /// REMOVE_DESTINATION / REMOVE_RCV_DESTINATION.
    RemoveDestination {
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
        channel: String,
        receive: bool,
    },
    /// REMOVE_DESTINATION_BY_ID: the destination the ADD_DESTINATION whose
    /// correlation id was `destination_registration_id` added.
    RemoveDestinationById {
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
        destination_registration_id: i64,
    },
    /// GET_NEXT_AVAILABLE_SESSION_ID: a session id no active publication of
    /// `stream_id` has.
    GetNextAvailableSessionId {
        client_id: i64,
        correlation_id: i64,
        stream_id: i32,
    },
}

impl Command {
    /// Whether `type_id` is a command type this protocol knows.
    pub fn is_known_type(type_id: i32) -> bool {
        use command_type::*;
        matches!(
            type_id,
            ADD_PUBLICATION
                | REMOVE_PUBLICATION
                | ADD_EXCLUSIVE_PUBLICATION
                | ADD_SUBSCRIPTION
                | REMOVE_SUBSCRIPTION
                | CLIENT_KEEPALIVE
                | ADD_COUNTER
                | REMOVE_COUNTER
                | CLIENT_CLOSE
                | TERMINATE_DRIVER
                | ADD_DESTINATION
                | REMOVE_DESTINATION
                | ADD_RCV_DESTINATION
                | REMOVE_RCV_DESTINATION
                | REMOVE_DESTINATION_BY_ID
                | GET_NEXT_AVAILABLE_SESSION_ID
        )
    }

    /// The client that sent the command.
    pub fn client_id(&self) -> i64 {
        match self {
            Command::AddPublication { client_id, .. }
            | Command::RemovePublication { client_id, .. }
            | Command::AddSubscription { client_id, .. }
            | Command::RemoveSubscription { client_id, .. }
            | Command::AddCounter { client_id, .. }
            | Command::RemoveCounter { client_id, .. }
            | Command::ClientKeepalive { client_id }
            | Command::ClientClose { client_id }
            | Command::TerminateDriver { client_id, .. }
            | Command::AddDestination { client_id, .. }
            | Command::RemoveDestination { client_id, .. }
            | Command::RemoveDestinationById { client_id, .. }
            | Command::GetNextAvailableSessionId { client_id, .. } => *client_id,
        }
    }

    /// Encodes to `(type id, body)`.
    pub fn encode(&self) -> (i32, Vec<u8>) {
        use command_type::*;
        match self {
            Command::AddPublication {
                client_id,
                correlation_id,
                stream_id,
                channel,
                exclusive,
            } => (
                if *exclusive {
                    ADD_EXCLUSIVE_PUBLICATION
                } else {
                    ADD_PUBLICATION
                },
                Writer::default()
                    .i64(*client_id)
                    .i64(*correlation_id)
                    .i32(*stream_id)
                    .string(channel)
                    .0,
            ),
            Command::RemovePublication {
                client_id,
                correlation_id,
                registration_id,
            } => (
                REMOVE_PUBLICATION,
                Writer::default()
                    .i64(*client_id)
                    .i64(*correlation_id)
                    .i64(*registration_id)
                    .i64(0)
                    .0,
            ),
            Command::AddSubscription {
                client_id,
                correlation_id,
                stream_id,
                channel,
            } => (
                ADD_SUBSCRIPTION,
                Writer::default()
                    .i64(*client_id)
                    .i64(*correlation_id)
                    .i64(-1)
                    .i32(*stream_id)
                    .string(channel)
                    .0,
            ),
            Command::RemoveSubscription {
                client_id,
                correlation_id,
                registration_id,
            } => (
                REMOVE_SUBSCRIPTION,
                Writer::default()
                    .i64(*client_id)
                    .i64(*correlation_id)
                    .i64(*registration_id)
                    .0,
            ),
            Command::AddCounter {
                client_id,
                correlation_id,
                type_id,
                key,
                label,
            } => {
                let mut w = Writer::default()
                    .i64(*client_id)
                    .i64(*correlation_id)
                    .i32(*type_id)
                    .i32(key.len() as i32);
                w.0.extend_from_slice(key);
                (ADD_COUNTER, w.align4().string(label).0)
            }
            Command::RemoveCounter {
                client_id,
                correlation_id,
                registration_id,
            } => (
                REMOVE_COUNTER,
                Writer::default()
                    .i64(*client_id)
                    .i64(*correlation_id)
                    .i64(*registration_id)
                    .0,
            ),
            Command::ClientKeepalive { client_id } => {
                (CLIENT_KEEPALIVE, Writer::default().i64(*client_id).i64(0).0)
            }
            Command::ClientClose { client_id } => {
                (CLIENT_CLOSE, Writer::default().i64(*client_id).i64(-1).0)
            }
            Command::TerminateDriver {
                client_id,
                correlation_id,
                token,
            } => {
                let mut w = Writer::default()
                    .i64(*client_id)
                    .i64(*correlation_id)
                    .i32(token.len() as i32);
                w.0.extend_from_slice(token);
                (TERMINATE_DRIVER, w.0)
            }
            Command::AddDestination {
                client_id,
                correlation_id,
                registration_id,
                channel,
                receive,
            }
            | Command::RemoveDestination {
                client_id,
                correlation_id,
                registration_id,
                channel,
                receive,
            } => {
                let add = matches!(self, Command::AddDestination { .. });
                let t = match (add, receive) {
                    (true, false) => ADD_DESTINATION,
                    (true, true) => ADD_RCV_DESTINATION,
                    (false, false) => REMOVE_DESTINATION,
                    (false, true) => REMOVE_RCV_DESTINATION,
                };
                (
                    t,
                    Writer::default()
                        .i64(*client_id)
                        .i64(*correlation_id)
                        .i64(*registration_id)
                        .string(channel)
                        .0,
                )
            }
            Command::RemoveDestinationById {
                client_id,
                correlation_id,
                registration_id,
                destination_registration_id,
            } => (
                REMOVE_DESTINATION_BY_ID,
                Writer::default()
                    .i64(*client_id)
                    .i64(*correlation_id)
                    .i64(*registration_id)
                    .i64(*destination_registration_id)
                    .0,
            ),
            Command::GetNextAvailableSessionId {
                client_id,
                correlation_id,
                stream_id,
            } => (
                GET_NEXT_AVAILABLE_SESSION_ID,
                Writer::default()
                    .i64(*client_id)
                    .i64(*correlation_id)
                    .i32(*stream_id)
                    .0,
            ),
        }
    }

    /// Decodes a command; unknown type ids and truncated bodies are errors.
    pub fn decode(type_id: i32, body: &[u8]) -> Result<Command, DecodeError> {
        use command_type::*;
        let mut r = Reader::new(body, "command");
        let client_id = r.i64()?;
        let correlation_id = r.i64()?;
        Ok(match type_id {
            ADD_PUBLICATION | ADD_EXCLUSIVE_PUBLICATION => Command::AddPublication {
                client_id,
                correlation_id,
                stream_id: r.i32()?,
                channel: r.string()?,
                exclusive: type_id == ADD_EXCLUSIVE_PUBLICATION,
            },
            REMOVE_PUBLICATION => Command::RemovePublication {
                client_id,
                correlation_id,
                registration_id: r.i64()?,
            },
            ADD_SUBSCRIPTION => {
                let _registration_correlation_id = r.i64()?;
                Command::AddSubscription {
                    client_id,
                    correlation_id,
                    stream_id: r.i32()?,
                    channel: r.string()?,
                }
            }
            REMOVE_SUBSCRIPTION => Command::RemoveSubscription {
                client_id,
                correlation_id,
                registration_id: r.i64()?,
            },
            ADD_COUNTER => {
                let type_id = r.i32()?;
                let key_len = r.i32()?;
                if key_len < 0 {
                    return Err(DecodeError(format!(
                        "command: negative counter key length {key_len}"
                    )));
                }
                let key = r.take(key_len as usize)?.to_vec();
                r.align4();
                Command::AddCounter {
                    client_id,
                    correlation_id,
                    type_id,
                    key,
                    label: r.string()?,
                }
            }
            REMOVE_COUNTER => Command::RemoveCounter {
                client_id,
                correlation_id,
                registration_id: r.i64()?,
            },
            CLIENT_KEEPALIVE => Command::ClientKeepalive { client_id },
            CLIENT_CLOSE => Command::ClientClose { client_id },
            TERMINATE_DRIVER => {
                let n = r.i32()?;
                if n < 0 {
                    return Err(DecodeError(format!("command: negative token length {n}")));
                }
                Command::TerminateDriver {
                    client_id,
                    correlation_id,
                    token: r.take(n as usize)?.to_vec(),
                }
            }
            ADD_DESTINATION | ADD_RCV_DESTINATION => Command::AddDestination {
                client_id,
                correlation_id,
                registration_id: r.i64()?,
                channel: r.string()?,
                receive: type_id == ADD_RCV_DESTINATION,
            },
            REMOVE_DESTINATION | REMOVE_RCV_DESTINATION => Command::RemoveDestination {
                client_id,
                correlation_id,
                registration_id: r.i64()?,
                channel: r.string()?,
                receive: type_id == REMOVE_RCV_DESTINATION,
            },
            REMOVE_DESTINATION_BY_ID => Command::RemoveDestinationById {
                client_id,
                correlation_id,
                registration_id: r.i64()?,
                destination_registration_id: r.i64()?,
            },
            GET_NEXT_AVAILABLE_SESSION_ID => Command::GetNextAvailableSessionId {
                client_id,
                correlation_id,
                stream_id: r.i32()?,
            },
            other => return Err(DecodeError(format!("unknown command type id {other:#x}"))),
        })
    }
}

/// A driver → client event.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// ON_ERROR.
    Error {
        correlation_id: i64,
        code: i32,
        message: String,
    },
    /// ON_PUBLICATION_READY / ON_EXCLUSIVE_PUBLICATION_READY.
    PublicationReady {
        correlation_id: i64,
        registration_id: i64,
        session_id: i32,
        stream_id: i32,
        position_limit_counter_id: i32,
        channel_status_counter_id: i32,
        log_file: String,
        exclusive: bool,
    },
    /// ON_SUBSCRIPTION_READY.
    SubscriptionReady {
        correlation_id: i64,
        channel_status_counter_id: i32,
    },
    /// ON_OPERATION_SUCCESS.
    OperationSuccess { correlation_id: i64 },
    /// ON_AVAILABLE_IMAGE.
    AvailableImage {
        correlation_id: i64,
        session_id: i32,
        stream_id: i32,
        subscription_registration_id: i64,
        subscriber_position_id: i32,
        log_file: String,
        source_identity: String,
    },
    /// ON_UNAVAILABLE_IMAGE.
    UnavailableImage {
        correlation_id: i64,
        subscription_registration_id: i64,
        stream_id: i32,
        channel: String,
    },
    /// ON_COUNTER_READY.
    CounterReady {
        correlation_id: i64,
        counter_id: i32,
    },
    /// ON_UNAVAILABLE_COUNTER.
    UnavailableCounter {
        registration_id: i64,
        counter_id: i32,
    },
    /// ON_CLIENT_TIMEOUT.
    ClientTimeout { client_id: i64 },
    /// ON_NEXT_AVAILABLE_SESSION_ID.
    NextAvailableSessionId {
        correlation_id: i64,
        session_id: i32,
    },
}

impl Event {
    /// Encodes to `(type id, body)`.
    pub fn encode(&self) -> (i32, Vec<u8>) {
        use event_type::*;
        match self {
            Event::Error {
                correlation_id,
                code,
                message,
            } => (
                ON_ERROR,
                Writer::default()
                    .i64(*correlation_id)
                    .i32(*code)
                    .string(message)
                    .0,
            ),
            Event::PublicationReady {
                correlation_id,
                registration_id,
                session_id,
                stream_id,
                position_limit_counter_id,
                channel_status_counter_id,
                log_file,
                exclusive,
            } => (
                if *exclusive {
                    ON_EXCLUSIVE_PUBLICATION_READY
                } else {
                    ON_PUBLICATION_READY
                },
                Writer::default()
                    .i64(*correlation_id)
                    .i64(*registration_id)
                    .i32(*session_id)
                    .i32(*stream_id)
                    .i32(*position_limit_counter_id)
                    .i32(*channel_status_counter_id)
                    .string(log_file)
                    .0,
            ),
            Event::SubscriptionReady {
                correlation_id,
                channel_status_counter_id,
            } => (
                ON_SUBSCRIPTION_READY,
                Writer::default()
                    .i64(*correlation_id)
                    .i32(*channel_status_counter_id)
                    .0,
            ),
            Event::OperationSuccess { correlation_id } => (
                ON_OPERATION_SUCCESS,
                Writer::default().i64(*correlation_id).0,
            ),
            Event::AvailableImage {
                correlation_id,
                session_id,
                stream_id,
                subscription_registration_id,
                subscriber_position_id,
                log_file,
                source_identity,
            } => (
                ON_AVAILABLE_IMAGE,
                Writer::default()
                    .i64(*correlation_id)
                    .i32(*session_id)
                    .i32(*stream_id)
                    .i64(*subscription_registration_id)
                    .i32(*subscriber_position_id)
                    .string(log_file)
                    .align4()
                    .string(source_identity)
                    .0,
            ),
            Event::UnavailableImage {
                correlation_id,
                subscription_registration_id,
                stream_id,
                channel,
            } => (
                ON_UNAVAILABLE_IMAGE,
                Writer::default()
                    .i64(*correlation_id)
                    .i64(*subscription_registration_id)
                    .i32(*stream_id)
                    .string(channel)
                    .0,
            ),
            Event::CounterReady {
                correlation_id,
                counter_id,
            } => (
                ON_COUNTER_READY,
                Writer::default().i64(*correlation_id).i32(*counter_id).0,
            ),
            Event::UnavailableCounter {
                registration_id,
                counter_id,
            } => (
                ON_UNAVAILABLE_COUNTER,
                Writer::default().i64(*registration_id).i32(*counter_id).0,
            ),
            Event::ClientTimeout { client_id } => {
                (ON_CLIENT_TIMEOUT, Writer::default().i64(*client_id).0)
            }
            Event::NextAvailableSessionId {
                correlation_id,
                session_id,
            } => (
                ON_NEXT_AVAILABLE_SESSION_ID,
                Writer::default().i64(*correlation_id).i32(*session_id).0,
            ),
        }
    }

    /// Decodes an event; unknown type ids and truncated bodies are errors.
    pub fn decode(type_id: i32, body: &[u8]) -> Result<Event, DecodeError> {
        use event_type::*;
        let mut r = Reader::new(body, "event");
        Ok(match type_id {
            ON_ERROR => Event::Error {
                correlation_id: r.i64()?,
                code: r.i32()?,
                message: r.string()?,
            },
            ON_PUBLICATION_READY | ON_EXCLUSIVE_PUBLICATION_READY => Event::PublicationReady {
                correlation_id: r.i64()?,
                registration_id: r.i64()?,
                session_id: r.i32()?,
                stream_id: r.i32()?,
                position_limit_counter_id: r.i32()?,
                channel_status_counter_id: r.i32()?,
                log_file: r.string()?,
                exclusive: type_id == ON_EXCLUSIVE_PUBLICATION_READY,
            },
            ON_SUBSCRIPTION_READY => Event::SubscriptionReady {
                correlation_id: r.i64()?,
                channel_status_counter_id: r.i32()?,
            },
            ON_OPERATION_SUCCESS => Event::OperationSuccess {
                correlation_id: r.i64()?,
            },
            ON_AVAILABLE_IMAGE => {
                let correlation_id = r.i64()?;
                let session_id = r.i32()?;
                let stream_id = r.i32()?;
                let subscription_registration_id = r.i64()?;
                let subscriber_position_id = r.i32()?;
                let log_file = r.string()?;
                r.align4();
                Event::AvailableImage {
                    correlation_id,
                    session_id,
                    stream_id,
                    subscription_registration_id,
                    subscriber_position_id,
                    log_file,
                    source_identity: r.string()?,
                }
            }
            ON_UNAVAILABLE_IMAGE => Event::UnavailableImage {
                correlation_id: r.i64()?,
                subscription_registration_id: r.i64()?,
                stream_id: r.i32()?,
                channel: r.string()?,
            },
            ON_COUNTER_READY => Event::CounterReady {
                correlation_id: r.i64()?,
                counter_id: r.i32()?,
            },
            ON_UNAVAILABLE_COUNTER => Event::UnavailableCounter {
                registration_id: r.i64()?,
                counter_id: r.i32()?,
            },
            ON_CLIENT_TIMEOUT => Event::ClientTimeout {
                client_id: r.i64()?,
            },
            ON_NEXT_AVAILABLE_SESSION_ID => Event::NextAvailableSessionId {
                correlation_id: r.i64()?,
                session_id: r.i32()?,
            },
            other => return Err(DecodeError(format!("unknown event type id {other:#x}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_round_trip_every_command() {
        let cmds = vec![
            Command::AddPublication {
                client_id: 1,
                correlation_id: 2,
                stream_id: 10,
                channel: "aeron:ipc".into(),
                exclusive: true,
            },
            Command::RemovePublication {
                client_id: 1,
                correlation_id: 3,
                registration_id: 2,
            },
            Command::AddSubscription {
                client_id: 1,
                correlation_id: 4,
                stream_id: 10,
                channel: "aeron:ipc".into(),
            },
            Command::RemoveSubscription {
                client_id: 1,
                correlation_id: 5,
                registration_id: 4,
            },
            Command::AddCounter {
                client_id: 1,
                correlation_id: 6,
                type_id: 1001,
                key: vec![1, 2, 3],
                label: "x".into(),
            },
            Command::RemoveCounter {
                client_id: 1,
                correlation_id: 7,
                registration_id: 6,
            },
            Command::ClientKeepalive { client_id: 1 },
            Command::ClientClose { client_id: 1 },
            Command::TerminateDriver {
                client_id: 1,
                correlation_id: 8,
                token: b"tok".to_vec(),
            },
        ];
        let mut cmds = cmds;
        for receive in [false, true] {
            cmds.push(Command::AddDestination {
                client_id: 1,
                correlation_id: 9,
                registration_id: 2,
                channel: "aeron:udp?endpoint=h:1".into(),
                receive,
            });
            cmds.push(Command::RemoveDestination {
                client_id: 1,
                correlation_id: 10,
                registration_id: 2,
                channel: "aeron:udp?endpoint=h:1".into(),
                receive,
            });
        }
        cmds.push(Command::RemoveDestinationById {
            client_id: 1,
            correlation_id: 11,
            registration_id: 2,
            destination_registration_id: 9,
        });
        cmds.push(Command::GetNextAvailableSessionId {
            client_id: 1,
            correlation_id: 12,
            stream_id: 1001,
        });
        for c in cmds {
            let (t, body) = c.encode();
            assert_eq!(Command::decode(t, &body).unwrap(), c);
        }
    }

    #[test]
    fn should_round_trip_every_event() {
        let events = vec![
            Event::Error {
                correlation_id: 1,
                code: 1,
                message: "bad".into(),
            },
            Event::PublicationReady {
                correlation_id: 1,
                registration_id: 1,
                session_id: 5,
                stream_id: 10,
                position_limit_counter_id: 3,
                channel_status_counter_id: -1,
                log_file: "/dev/shm/x/1.logbuffer".into(),
                exclusive: false,
            },
            Event::SubscriptionReady {
                correlation_id: 2,
                channel_status_counter_id: -1,
            },
            Event::OperationSuccess { correlation_id: 3 },
            Event::AvailableImage {
                correlation_id: 1,
                session_id: 5,
                stream_id: 10,
                subscription_registration_id: 2,
                subscriber_position_id: 9,
                log_file: "abc".into(),
                source_identity: "aeron:ipc".into(),
            },
            Event::UnavailableImage {
                correlation_id: 1,
                subscription_registration_id: 2,
                stream_id: 10,
                channel: "aeron:ipc".into(),
            },
            Event::CounterReady {
                correlation_id: 4,
                counter_id: 7,
            },
            Event::UnavailableCounter {
                registration_id: 4,
                counter_id: 7,
            },
            Event::ClientTimeout { client_id: 9 },
            Event::NextAvailableSessionId {
                correlation_id: 12,
                session_id: -7,
            },
        ];
        for e in events {
            let (t, body) = e.encode();
            assert_eq!(Event::decode(t, &body).unwrap(), e);
        }
    }

    #[test]
    fn should_reject_truncated_and_unknown_messages() {
        let (t, body) = Command::AddSubscription {
            client_id: 1,
            correlation_id: 4,
            stream_id: 10,
            channel: "aeron:ipc".into(),
        }
        .encode();
        for cut in 0..body.len() {
            assert!(Command::decode(t, &body[..cut]).is_err(), "cut at {cut}");
        }
        assert!(Command::decode(0x77, &[0u8; 16])
            .unwrap_err()
            .0
            .contains("unknown command"));
        let mut bad = body.clone();
        bad[28..32].copy_from_slice(&(-5i32).to_le_bytes());
        assert!(Command::decode(t, &bad).is_err());
    }
}
