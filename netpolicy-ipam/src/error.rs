//! Errors of `netpolicy-ipam`: data (`Clone`, `PartialEq`), each naming what it is
//! about, so callers can report it and tests can compare it.

use netpolicy_core::{FieldError, model::IpFamily};

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `netpolicy-ipam`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The pool definition is invalid; every problem is listed with its field.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<FieldError>),
    /// The requested value is held by another owner.
    #[error("{value} is taken by {holder}")]
    Taken {
        /// The requested value.
        value: String,
        /// Who holds it.
        holder: String,
    },
    /// The owner already holds a different value (an owner holds one per pool).
    #[error("{owner} already holds {held}; release it before asking for {requested}")]
    OwnerHoldsOther {
        /// The owner.
        owner: String,
        /// What it holds.
        held: String,
        /// What it asked for.
        requested: String,
    },
    /// The value is not in the pool at all.
    #[error("{value} is outside the pool")]
    OutsidePool {
        /// The value.
        value: String,
    },
    /// The value is in the pool's CIDRs or ranges but excluded.
    #[error("{value} is excluded from the pool")]
    Excluded {
        /// The value.
        value: String,
    },
    /// The value is inside the pool's prefixes but never handed out.
    #[error("{value} is not usable: {reason}")]
    Unusable {
        /// The value.
        value: String,
        /// Why.
        reason: &'static str,
    },
    /// The value is of the other address family.
    #[error("{value} is not {family}, the pool's family")]
    WrongFamily {
        /// The value.
        value: String,
        /// The pool's family.
        family: IpFamily,
    },
    /// Every value is taken.
    #[error("the pool is exhausted ({capacity} of {capacity} allocated)")]
    Exhausted {
        /// The pool's capacity.
        capacity: u128,
    },
    /// The pool is draining: it keeps its allocations and makes no new ones.
    #[error("pool {pool} is draining: it keeps existing allocations and makes no new ones")]
    Draining {
        /// The pool.
        pool: String,
    },
    /// No pool of that name.
    #[error("there is no pool named {pool:?}")]
    UnknownPool {
        /// The name asked for.
        pool: String,
    },
    /// Two pools share addresses.
    #[error("pools {first} and {second} overlap (both contain {address})")]
    Overlap {
        /// One pool.
        first: String,
        /// The other pool.
        second: String,
        /// The first shared address.
        address: String,
    },
    /// Persisted allocations cannot be restored as they are; nothing was restored.
    #[error("cannot restore: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Restore(Vec<RestoreProblem>),
}

/// One problem in persisted allocations.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, thiserror::Error)]
pub enum RestoreProblem {
    /// Two owners on one value.
    #[error("{value} is held by both {first} and {second}")]
    SharedValue {
        /// The value.
        value: String,
        /// One owner.
        first: String,
        /// The other owner.
        second: String,
    },
    /// One owner on two values.
    #[error("{owner} holds both {first} and {second}")]
    OwnerTwice {
        /// The owner.
        owner: String,
        /// One value.
        first: String,
        /// The other value.
        second: String,
    },
    /// A value the pool does not contain (any more).
    #[error("{owner} holds {value}, which is not in the pool: {reason}")]
    NotInPool {
        /// The owner.
        owner: String,
        /// The value.
        value: String,
        /// Why it is not in the pool.
        reason: String,
    },
}

impl Error {
    /// Field problems, for [`Error::Invalid`]; empty otherwise.
    pub fn field_errors(&self) -> &[FieldError] {
        match self {
            Self::Invalid(v) => v,
            _ => &[],
        }
    }
}
