//! Events and actions as Rust types (docs/embedded.md, "Typed events and
//! actions"), checked against the app file when Jadpo is built: a field
//! missing, extra or of another type is a start error naming it, not a
//! refused emit or a failed run later.
//!
//! A type's fields are read by tracing its `Deserialize` impl
//! (`serde-reflection`), so the names are the ones serde writes and reads
//! (`#[serde(rename)]` included) and no value of the type is needed.

use crate::{Builder, StartError};
use jadpo_lang::{App, Field, Type};
use jadpo_runtime::interpreter::RustAction;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_reflection::{ContainerFormat, Format, Registry, Tracer, TracerConfig, VariantFormat};
use std::fmt;
use std::sync::Arc;

/// An event of the app as a Rust type, emitted with `Jadpo::emit_event`:
///
/// ```
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct PaymentReceived {
///     payment_id: String,
///     amount_cents: i64,
/// }
///
/// impl jadpo::Event for PaymentReceived {
///     const NAME: &'static str = "PaymentReceived";
/// }
/// ```
///
/// Registered with `Builder::event`, its fields are checked against the
/// app file's `event PaymentReceived { ... }` at `build()`: each declared
/// field, and no other, with its type (`string`: `String`, `&str`, `char`
/// or an enum of unit variants; `int`: `i8` to `i64`, `u8` to `u32`;
/// `float`: `f32`, `f64` or an integer; `bool`; `object`: a struct or a
/// map; `list`: a `Vec`, a tuple or an array). `Deserialize` is only what
/// lets the check read the fields.
pub trait Event: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The event's name, as the app file declares it.
    const NAME: &'static str;
}

/// An event's JSON, or why serde could not make it (a map whose keys are
/// not strings, a `Serialize` impl that fails).
pub(crate) fn to_payload<E: Event>(event: &E) -> Result<serde_json::Value, crate::EmitError> {
    serde_json::to_value(event).map_err(|e| {
        crate::EmitError::Event(jadpo_runtime::emit::EventError::Invalid {
            field: None,
            message: format!("`{}` did not serialize to JSON: {e}", std::any::type_name::<E>()),
        })
    })
}

impl Builder {
    /// Supplies an action declared with `uses` in the app as a function of
    /// a type of your own: the run's arguments, by parameter name, are
    /// deserialized into `A`. `build()` checks `A` against the action's
    /// parameters (each field one of them, of its type; parameters it
    /// leaves out are not read), so a mismatch is `action.args_mismatch`
    /// naming the field, before anything runs.
    ///
    /// ```
    /// # fn example(builder: jadpo::Builder) -> jadpo::Builder {
    /// #[derive(serde::Deserialize)]
    /// struct ScoreArgs {
    ///     order_id: String,
    ///     total_cents: i64,
    /// }
    ///
    /// builder.typed_action("score_fraud", |args: ScoreArgs, _connections| async move {
    ///     if args.total_cents > 1_000_000 {
    ///         return Err(jadpo::core::Failure::new("fraud.too_large", jadpo::core::FailureKind::Rejected));
    ///     }
    ///     Ok(())
    /// })
    /// # }
    /// ```
    pub fn typed_action<A, F, Fut>(mut self, name: &str, f: F) -> Self
    where
        A: serde::de::DeserializeOwned + Send + 'static,
        F: Fn(A, jadpo_runtime::interpreter::ConnectionHandle) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<(), jadpo_core::Failure>> + Send + 'static,
    {
        let action = name.to_owned();
        self.checks.push(Box::new(move |app: &App| {
            let Some(declared) = app.actions.get(&action) else {
                // Unknown names are `Builder::action`'s error, said once.
                return Ok(());
            };
            check::<A>(&format!("action `{action}`"), &declared.params, false, Nulls::Unused)
                .map_err(|mismatch| StartError::ActionArgs { action, mismatch })
        }));
        let f = Arc::new(f);
        let run: RustAction = Arc::new(move |args, connections| {
            let f = f.clone();
            Box::pin(async move {
                let fields = serde_json::Value::Object(args.args.into_iter().collect());
                // Checked at build(), so only a value the check could not see
                // (a number past the Rust field's range) lands here: the
                // action's own defect, not the provider's.
                let typed: A = serde_json::from_value(fields).map_err(|_| {
                    jadpo_core::Failure::new("action.args_invalid", jadpo_core::FailureKind::InternalFault)
                })?;
                f(typed, connections).await
            })
        });
        self.action(name, run)
    }

    /// Checks the Rust type `E` against the app's declaration of the event
    /// [`Event::NAME`] at `build()`: the same fields, each of its type, or
    /// `event.type_mismatch` naming the field. [`crate::Jadpo::emit_event`] emits
    /// one.
    pub fn event<E: Event>(mut self) -> Self {
        self.checks.push(Box::new(|app: &App| {
            let event = E::NAME.to_owned();
            let Some(declared) = app.events.get(&event) else {
                let known: Vec<&str> = app.events.keys().map(String::as_str).collect();
                return Err(StartError::EventType {
                    mismatch: TypeMismatch {
                        field: None,
                        message: format!(
                            "`{}` stands for event `{event}`, which the app does not declare; declared: {}",
                            std::any::type_name::<E>(),
                            known.join(", ")
                        ),
                    },
                    event,
                });
            };
            check::<E>(&format!("event `{event}`"), &declared.fields, true, Nulls::Refused)
                .map_err(|mismatch| StartError::EventType { event, mismatch })
        }));
        self
    }
}

/// Why a Rust type does not match the app file's declaration: the field
/// at fault, if one is, and what to change.
///
/// ```
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Ping { id: u64 }   // the app says `id: string`
/// impl jadpo::Event for Ping { const NAME: &'static str = "Ping"; }
///
/// let err = jadpo::builder()
///     .app_source("app.jadpo", "event Ping { id: string }")?
///     .event::<Ping>()
///     .ready()
///     .err()
///     .expect("the types disagree");
/// let jadpo::StartError::EventType { mismatch, .. } = &err else { panic!("{err}") };
/// assert_eq!(mismatch.field.as_deref(), Some("id"));
/// # Ok::<(), jadpo::StartError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeMismatch {
    /// The field (or parameter) at fault; `None` when the type as a whole
    /// is (not a struct, or one the check cannot read).
    pub field: Option<String>,
    /// What is wrong and what to change.
    pub message: String,
}

impl fmt::Display for TypeMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Whether a value of the Rust format may be `null`: an event's fields
/// never may (the emit refuses one), an action's arguments are never null,
/// so an `Option` there is only a field the action may do without.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nulls {
    Refused,
    Unused,
}

/// Checks that `T`'s fields are `declared`, each with a type the app's
/// accepts. `what` names the declaration in messages (`event
/// `PaymentReceived``). With `exact`, every declared field must be in `T`
/// too (an event's payload carries them all); without, `T` may leave some
/// out (an action reads the arguments it wants).
pub(crate) fn check<T: DeserializeOwned>(
    what: &str,
    declared: &[Field],
    exact: bool,
    nulls: Nulls,
) -> Result<(), TypeMismatch> {
    let type_name = std::any::type_name::<T>();
    let whole = |message: String| TypeMismatch { field: None, message };
    let (format, registry) = match trace::<T>() {
        Ok(found) => found,
        Err(e) => {
            return Err(whole(format!(
                "the fields of `{type_name}` cannot be read to check them against {what} ({e}): \
                 `serde_json::Value`, `#[serde(flatten)]` and untagged enums cannot; give each \
                 field a type of its own, or use the untyped API"
            )))
        }
    };
    let fields = match container(&format, &registry) {
        Some(ContainerFormat::Struct(fields)) => fields,
        _ => {
            return Err(whole(format!(
                "`{type_name}` must be a struct with named fields to stand for {what}"
            )))
        }
    };
    for f in fields {
        let Some(d) = declared.iter().find(|d| d.name == f.name) else {
            return Err(TypeMismatch {
                field: Some(f.name.clone()),
                message: format!(
                    "`{type_name}` has a field `{}` that {what} does not declare; declared: {}",
                    f.name,
                    names(declared)
                ),
            });
        };
        if let Err(why) = fits(d.ty, &f.value, &registry, nulls) {
            return Err(TypeMismatch {
                field: Some(f.name.clone()),
                message: format!(
                    "field `{}` of `{type_name}` must hold {} as {what} declares it: {why}",
                    f.name,
                    d.ty.name()
                ),
            });
        }
    }
    if exact {
        if let Some(d) = declared.iter().find(|d| !fields.iter().any(|f| f.name == d.name)) {
            return Err(TypeMismatch {
                field: Some(d.name.clone()),
                message: format!(
                    "`{type_name}` has no field `{}` ({}), which {what} declares",
                    d.name,
                    d.ty.name()
                ),
            });
        }
    }
    Ok(())
}

/// How many passes a type's tracing may take: one per variant of its
/// enums, in the end. An explicit bound rather than a loop on hope.
const MAX_PASSES: usize = 256;

/// `T`'s format and the containers it names. Each pass over `T` explores
/// one more variant of each enum left incomplete; the enums are found by a
/// first pass of a tracer of their own (`check_incomplete_enum` needs their
/// names).
fn trace<T: DeserializeOwned>() -> serde_reflection::Result<(Format, Registry)> {
    let samples = serde_reflection::Samples::new();
    let enums: Vec<String> = {
        let mut first = Tracer::new(TracerConfig::default());
        first.trace_type_once::<T>(&samples)?;
        first
            .registry_unchecked()
            .into_iter()
            .filter(|(_, c)| matches!(c, ContainerFormat::Enum(_)))
            .map(|(name, _)| name)
            .collect()
    };
    let mut tracer = Tracer::new(TracerConfig::default());
    let mut format = None;
    for _ in 0..MAX_PASSES {
        format = Some(tracer.trace_type_once::<T>(&samples)?.0);
        // Every name asked, so each one's mark is cleared for the next pass.
        let incomplete = enums
            .iter()
            .filter(|name| tracer.check_incomplete_enum(name).is_some())
            .count();
        if incomplete == 0 {
            break;
        }
    }
    let mut format = format.expect("at least one pass");
    serde_reflection::FormatHolder::normalize(&mut format)?;
    Ok((format, tracer.registry()?))
}

fn names(declared: &[Field]) -> String {
    if declared.is_empty() {
        return "none".into();
    }
    let names: Vec<&str> = declared.iter().map(|d| d.name.as_str()).collect();
    names.join(", ")
}

/// The container a format names, through newtype wrappers.
fn container<'a>(format: &Format, registry: &'a Registry) -> Option<&'a ContainerFormat> {
    match format {
        Format::TypeName(name) => match registry.get(name)? {
            ContainerFormat::NewTypeStruct(inner) => container(inner, registry),
            other => Some(other),
        },
        _ => None,
    }
}

/// Whether values of `format` are always of the app's `ty`, or why not.
fn fits(ty: Type, format: &Format, registry: &Registry, nulls: Nulls) -> Result<(), String> {
    use Format as F;
    let rust = describe(format);
    let no = || Err(format!("`{rust}` is not {}", ty.name()));
    match format {
        F::Option(inner) => match nulls {
            Nulls::Refused => Err(format!(
                "an `Option` may be null, which the emit refuses; make it `{}`",
                describe(inner)
            )),
            Nulls::Unused => fits(ty, inner, registry, nulls),
        },
        F::TypeName(name) => match registry.get(name) {
            Some(ContainerFormat::NewTypeStruct(inner)) => fits(ty, inner, registry, nulls),
            Some(ContainerFormat::Struct(_)) if ty == Type::Object => Ok(()),
            Some(ContainerFormat::TupleStruct(_)) if ty == Type::List => Ok(()),
            Some(ContainerFormat::Enum(variants)) if ty == Type::String => {
                if variants.values().all(|v| matches!(v.value, VariantFormat::Unit)) {
                    Ok(())
                } else {
                    Err(format!(
                        "enum `{name}` has variants with data, which are not strings; \
                         only an enum of unit variants is"
                    ))
                }
            }
            _ => no(),
        },
        F::Str | F::Char if ty == Type::String => Ok(()),
        F::I8 | F::I16 | F::I32 | F::I64 | F::U8 | F::U16 | F::U32 if matches!(ty, Type::Int | Type::Float) => Ok(()),
        F::U64 | F::U128 | F::I128 if ty == Type::Int => Err(format!(
            "`{rust}` can hold values past int's 64-bit signed range; use `i64`"
        )),
        F::F32 | F::F64 if ty == Type::Float => Ok(()),
        F::Bool if ty == Type::Bool => Ok(()),
        F::Map { .. } if ty == Type::Object => Ok(()),
        F::Seq(_) | F::Tuple(_) | F::TupleArray { .. } if ty == Type::List => Ok(()),
        _ => no(),
    }
}

/// A format as a Rust type, for messages.
fn describe(format: &Format) -> String {
    use Format as F;
    match format {
        F::TypeName(name) => name.clone(),
        F::Unit => "()".into(),
        F::Bool => "bool".into(),
        F::I8 => "i8".into(),
        F::I16 => "i16".into(),
        F::I32 => "i32".into(),
        F::I64 => "i64".into(),
        F::I128 => "i128".into(),
        F::U8 => "u8".into(),
        F::U16 => "u16".into(),
        F::U32 => "u32".into(),
        F::U64 => "u64".into(),
        F::U128 => "u128".into(),
        F::F32 => "f32".into(),
        F::F64 => "f64".into(),
        F::Char => "char".into(),
        F::Str => "String".into(),
        F::Bytes => "bytes".into(),
        F::Option(inner) => format!("Option<{}>", describe(inner)),
        F::Seq(inner) => format!("Vec<{}>", describe(inner)),
        F::Map { key, value } => format!("map of {} to {}", describe(key), describe(value)),
        F::Tuple(items) => format!("({})", items.iter().map(describe).collect::<Vec<_>>().join(", ")),
        F::TupleArray { content, size } => format!("[{}; {size}]", describe(content)),
        F::Variable(_) => "?".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use std::collections::BTreeMap;

    fn declared(fields: &[(&str, Type)]) -> Vec<Field> {
        fields
            .iter()
            .map(|(name, ty)| Field {
                name: (*name).into(),
                ty: *ty,
                span: Default::default(),
            })
            .collect()
    }

    fn paid() -> Vec<Field> {
        declared(&[("payment_id", Type::String), ("amount_cents", Type::Int)])
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Paid {
        payment_id: String,
        amount_cents: i64,
    }

    #[test]
    fn a_struct_with_the_declared_fields_fits() {
        assert_eq!(check::<Paid>("event `Paid`", &paid(), true, Nulls::Refused), Ok(()));
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Renamed {
        #[serde(rename = "payment_id")]
        id: String,
        amount_cents: u32,
    }

    #[test]
    fn serde_names_are_the_ones_checked() {
        assert_eq!(check::<Renamed>("event `Paid`", &paid(), true, Nulls::Refused), Ok(()));
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Short {
        payment_id: String,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Long {
        payment_id: String,
        amount_cents: i64,
        note: String,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Mistyped {
        payment_id: String,
        amount_cents: String,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Unsigned {
        payment_id: String,
        amount_cents: u64,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Optional {
        payment_id: String,
        amount_cents: Option<i64>,
    }

    #[test]
    fn each_disagreement_names_its_field() {
        let field = |r: Result<(), TypeMismatch>| r.unwrap_err().field;
        let e = |exact| check::<Short>("event `Paid`", &paid(), exact, Nulls::Refused);
        assert_eq!(field(e(true)), Some("amount_cents".into()), "missing");
        assert_eq!(e(false), Ok(()), "an action may read fewer");
        let long = check::<Long>("event `Paid`", &paid(), true, Nulls::Refused).unwrap_err();
        assert_eq!(long.field.as_deref(), Some("note"));
        assert!(long.message.contains("payment_id, amount_cents"), "{long}");
        let mistyped = check::<Mistyped>("event `Paid`", &paid(), true, Nulls::Refused).unwrap_err();
        assert_eq!(mistyped.field.as_deref(), Some("amount_cents"));
        assert!(mistyped.message.contains("`String` is not int"), "{mistyped}");
        let unsigned = check::<Unsigned>("event `Paid`", &paid(), true, Nulls::Refused).unwrap_err();
        assert!(unsigned.message.contains("use `i64`"), "{unsigned}");
        let optional = check::<Optional>("event `Paid`", &paid(), true, Nulls::Refused).unwrap_err();
        assert!(optional.message.contains("make it `i64`"), "{optional}");
        assert_eq!(check::<Optional>("action `pay`", &paid(), false, Nulls::Unused), Ok(()));
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    enum Currency {
        Eur,
        Usd,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    enum Tagged {
        Card(String),
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Address {
        city: String,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Cents(i64);

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Everything {
        currency: Currency,
        ratio: f64,
        whole_ratio: i32,
        paid: bool,
        address: Address,
        tags: BTreeMap<String, String>,
        items: Vec<u8>,
        pair: (String, i64),
        cents: Cents,
    }

    #[test]
    fn each_app_type_has_its_rust_ones() {
        let all = declared(&[
            ("currency", Type::String),
            ("ratio", Type::Float),
            ("whole_ratio", Type::Float),
            ("paid", Type::Bool),
            ("address", Type::Object),
            ("tags", Type::Object),
            ("items", Type::List),
            ("pair", Type::List),
            ("cents", Type::Int),
        ]);
        assert_eq!(check::<Everything>("event `All`", &all, true, Nulls::Refused), Ok(()));
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct WithData {
        method: Tagged,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Untraceable {
        payload: serde_json::Value,
    }

    #[test]
    fn what_cannot_be_checked_is_said() {
        let method = declared(&[("method", Type::String)]);
        let e = check::<WithData>("event `E`", &method, true, Nulls::Refused).unwrap_err();
        assert!(e.message.contains("only an enum of unit variants"), "{e}");
        let payload = declared(&[("payload", Type::Object)]);
        let e = check::<Untraceable>("event `E`", &payload, true, Nulls::Refused).unwrap_err();
        assert_eq!(e.field, None);
        assert!(e.message.contains("serde_json::Value"), "{e}");
        let e = check::<String>("event `E`", &payload, true, Nulls::Refused).unwrap_err();
        assert!(e.message.contains("must be a struct"), "{e}");
    }
}
