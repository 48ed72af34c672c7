//! The parsed file before checking: blocks are lists of `key: value`
//! entries and values are untyped. Keeping the parser this generic means a
//! misspelt key or a value of the wrong kind is reported by the checker with
//! a precise code, instead of as a syntax error.

use crate::diagnostic::Span;

#[derive(Clone, Debug)]
pub(crate) struct Ident {
    pub name: String,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub key: Ident,
    pub value: Expr,
}

#[derive(Clone, Debug)]
pub(crate) struct Arg {
    pub name: Option<Ident>,
    pub value: Expr,
}

#[derive(Clone, Debug)]
pub(crate) struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub(crate) enum ExprKind {
    Str(String),
    /// Kept as written; see [`Number`].
    Number(Number),
    /// `50/s`: a number, `/` and what follows it, for `rate:`. `unit` is
    /// the word or number after the `/`, as written, and `None` when
    /// neither follows; the checker decides what is a unit.
    Rate {
        count: Number,
        unit: Option<Ident>,
    },
    Bool(bool),
    Object(Vec<Entry>),
    List(Vec<Expr>),
    /// `http`, `payment_id`, `event`, `event.payment_id`.
    Path(Vec<Ident>),
    /// `record_payment(event.payment_id)`, `env("X")`.
    Call {
        callee: Vec<Ident>,
        args: Vec<Arg>,
    },
}

/// A number as written. Whether it is an int, a float or a duration, and
/// whether it fits, depends on where it stands, so the checker decides.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Number {
    pub negative: bool,
    pub int: String,
    pub frac: Option<String>,
    pub unit: Option<String>,
}

impl Number {
    /// The integer, when the number is one without a unit; saturates
    /// rather than failing so "too big" is reported as out of range.
    pub(crate) fn as_int(&self) -> Option<i128> {
        if self.frac.is_some() || self.unit.is_some() {
            return None;
        }
        let n = self.int.parse::<i128>().unwrap_or(i128::MAX);
        Some(if self.negative { -n } else { n })
    }

    pub(crate) fn as_float(&self) -> Option<f64> {
        if self.unit.is_some() {
            return None;
        }
        let text = format!("{}.{}", self.int, self.frac.as_deref().unwrap_or("0"));
        let n: f64 = text.parse().ok()?;
        Some(if self.negative { -n } else { n })
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Param {
    pub name: Ident,
    pub ty: Ident,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StmtKind {
    Call,
    Run,
    /// `emit EVENT(FIELD: VALUE, ...)`
    Emit,
}

#[derive(Clone, Debug)]
pub(crate) struct Stmt {
    pub kind: StmtKind,
    pub callee: Vec<Ident>,
    pub args: Vec<Arg>,
    pub span: Span,
}

/// `fills CAPABILITY { statements }` inside a connection block.
#[derive(Clone, Debug)]
pub(crate) struct Fill {
    pub capability: Ident,
    pub body: Vec<Stmt>,
}

#[derive(Clone, Debug)]
pub(crate) enum ItemKind {
    /// `event NAME [in STORE] { ... }`
    Event {
        entries: Vec<Entry>,
        store: Option<Ident>,
    },
    Connection {
        entries: Vec<Entry>,
        fills: Vec<Fill>,
    },
    Subscriber(Vec<Entry>),
    Schedule(Vec<Entry>),
    /// `alerts { ... }`: the one block without a name. Its [`Item::name`]
    /// is the keyword, so diagnostics about the block point at it.
    Alerts(Vec<Entry>),
    Action {
        params: Vec<Param>,
        uses: Option<Vec<Ident>>,
        body: Option<Vec<Stmt>>,
    },
    /// `capability NAME(PARAMS)`: no body; a connection fills it.
    Capability {
        params: Vec<Param>,
    },
    Route(Vec<Entry>),
    Store(Vec<Entry>),
}

#[derive(Clone, Debug)]
pub(crate) struct Item {
    pub kind: ItemKind,
    pub name: Ident,
    pub span: Span,
    /// A syntax error was reported inside this item. The checker still
    /// registers its name (so references to it are not reported as
    /// unknown) but does not report keys as missing: they may have been
    /// lost to the error.
    pub broken: bool,
}

pub(crate) const ITEM_KEYWORDS: [&str; 9] = [
    "event",
    "connection",
    "action",
    "subscriber",
    "schedule",
    "alerts",
    "capability",
    "route",
    "store",
];

/// The entry of a connection block that is not `key: value`.
pub(crate) const FILLS: &str = "fills";

/// The keyword of the block that has no name.
pub(crate) const ALERTS: &str = "alerts";
