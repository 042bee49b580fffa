//! The sulis client: publications, subscriptions and images over a media driver.
//!
//! ```no_run
//! use sulis_client::{Client, ClientContext};
//! let client = Client::connect(ClientContext::default()).unwrap();
//! let publication = client.add_publication("aeron:ipc", 10).unwrap();
//! let mut subscription = client.add_subscription("aeron:ipc", 10).unwrap();
//! let _ = publication.offer(b"hello");
//! subscription.poll(|payload, header| { let _ = (payload, header.session_id()); Ok::<(), ()>(()) }, 10).unwrap();
//! ```

pub mod assembler;
pub mod batch;
pub mod conductor;
pub mod counter;
mod driver_proxy;
pub mod image;
pub mod publication;
pub mod subscription;

pub use assembler::{Assembled, AssembledMessages, FragmentAssembler};
pub use batch::Batch;
pub use conductor::{Client, ClientContext, ImageEvent, ImageEvents, Interrupt};
pub use counter::Counter;
pub use image::{ControlledAction, Header, Image};
pub use publication::{
    BufferClaim, ExclusivePublication, OfferError, Publication, PublicationCore,
};
pub use subscription::{Subscription, SubscriptionShared};

/// Publication result codes (Aeron's values).
pub mod offer_code {
    /// No subscriber is connected.
    pub const NOT_CONNECTED: i64 = -1;
    /// Connected, but the publisher limit was reached: retry later.
    pub const BACK_PRESSURED: i64 = -2;
    /// A term rotation happened: retry at once.
    pub const ADMIN_ACTION: i64 = -3;
    /// The publication is closed.
    pub const CLOSED: i64 = -4;
    /// The stream reached its maximum position.
    pub const MAX_POSITION_EXCEEDED: i64 = -5;
}

/// Why a client operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientError {
    /// The driver did not answer or its heartbeat stopped.
    DriverTimeout(String),
    /// The driver timed this client out.
    ClientTimeout(String),
    /// The driver refused a command (code from `sulis_protocol::control::error_code`).
    Registration {
        /// Error code.
        code: i32,
        /// Driver's message.
        message: String,
    },
    /// Invalid argument or channel.
    Config(String),
    /// The resource or client is closed.
    Closed(String),
    /// A wait was cut short by the context's interrupt check (Ctrl-C).
    Interrupted(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::DriverTimeout(m)
            | ClientError::ClientTimeout(m)
            | ClientError::Config(m)
            | ClientError::Closed(m)
            | ClientError::Interrupted(m) => f.write_str(m),
            ClientError::Registration { code, message } => {
                write!(f, "{message} (error code {code})")
            }
        }
    }
}

impl std::error::Error for ClientError {}
