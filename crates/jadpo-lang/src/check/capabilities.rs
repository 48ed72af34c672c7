//! `capability NAME(PARAMS)` and the `fills NAME { ... }` entries of the
//! connections that supply them.
//!
//! A `fills` body is checked like an action's body, with the capability's
//! parameters, and may reach only its own connection: its calls are checked
//! here, and what its `run`s reach once the graph is resolved.

use super::exprs::Scope;
use super::graph::{Edges, Graph, Reach};
use super::{and_list, hint, Checker};
use crate::app::{Capability, Field, Statement};
use crate::diagnostic::{Code, Span};
use crate::syntax::{Fill, Ident, Item, StmtKind};
use std::collections::{BTreeMap, BTreeSet};

/// Past this many, a message names only the first connections.
const NAMES_SHOWN: usize = 8;

/// One checked `fills`.
pub(crate) struct FillNode {
    pub capability: String,
    pub filler: String,
    /// The capability's name after `fills`.
    pub span: Span,
    /// `None` when a statement failed to check.
    pub body: Option<Vec<Statement>>,
    pub edges: Edges,
}

/// Every `fills` of the file, and the one that counts for each capability.
#[derive(Default)]
pub(crate) struct Fills {
    all: Vec<FillNode>,
    /// Index in `all` of each capability's first fill.
    first: BTreeMap<String, usize>,
}

impl Checker<'_> {
    /// Checks the `fills` of one connection. `register` is false for a
    /// connection whose name is taken: its fills are checked, not counted.
    pub(crate) fn fills(&mut self, conn: &Item, written: &[Fill], register: bool, out: &mut Fills) {
        let filler = conn.name.name.as_str();
        for fill in written {
            let Some(node) = self.fill(fill, filler) else {
                continue;
            };
            if register {
                if let Some(&ix) = out.first.get(&node.capability) {
                    let first = &out.all[ix];
                    let line = self.line_of(first.span);
                    self.err(
                        Code::CapabilityFilledTwice,
                        node.span,
                        format!(
                            "capability `{}` is already filled by connection `{}` on line {line}; a capability \
                             has one filler: remove one of the `fills`",
                            node.capability, first.filler
                        ),
                    );
                } else {
                    out.first.insert(node.capability.clone(), out.all.len());
                }
            }
            out.all.push(node);
        }
    }

    /// One `fills CAPABILITY { ... }` of connection `filler`: its body
    /// checked with the capability's parameters, calling only `filler`.
    /// `None` when no capability has the name.
    fn fill(&mut self, fill: &Fill, filler: &str) -> Option<FillNode> {
        let cap = &fill.capability;
        let params = self.filled_params(cap)?;
        let scope = Scope::Action {
            name: &cap.name,
            params: &params,
            what: "capability",
        };
        let mut edges = Edges::default();
        edges.conns.insert(filler.to_string());
        let mut uses = Vec::new();
        let mut body = Some(Vec::new());
        for stmt in &fill.body {
            let checked = self.statement(stmt, &scope, &mut edges, &mut uses);
            match (checked, body.as_mut()) {
                (Some(s), Some(body)) => body.push(s),
                _ => body = None,
            }
            let other = &stmt.callee[0];
            if stmt.kind == StmtKind::Call && other.name != filler && self.connection_names.contains(&other.name) {
                self.err(
                    Code::CapabilityCallOutside,
                    other.span,
                    format!(
                        "capability `{}` is filled by connection `{filler}`, so its `fills` body calls only \
                         `{filler}`, not `{}`; call `{}` from the action that runs `{}`",
                        cap.name, other.name, other.name, cap.name
                    ),
                );
                body = None;
            }
        }
        edges.uses = uses;
        Some(FillNode {
            capability: cap.name.clone(),
            filler: filler.to_string(),
            span: cap.span,
            body,
            edges,
        })
    }

    /// The parameters of the capability a `fills` names, or `None`,
    /// reported, when it names an action or nothing declared.
    fn filled_params(&mut self, cap: &Ident) -> Option<Vec<Field>> {
        let found = match self.sigs.get(&cap.name) {
            Some(sig) if sig.what == "capability" => return Some(sig.params.clone()),
            found => found.is_some(),
        };
        let message = if found {
            format!(
                "`{}` is an action, not a capability; a connection fills a `capability {}(...)`: \
                 declare one, or run the action instead",
                cap.name, cap.name
            )
        } else {
            let capabilities = self.sigs.iter().filter(|(_, s)| s.what == "capability");
            let help = hint(&cap.name, capabilities.map(|(n, _)| n.as_str()), || {
                format!("declare it with `capability {}(...)`", cap.name)
            });
            format!("no capability is named `{}`; {help}", cap.name)
        };
        self.err(Code::CapabilityUnknown, cap.span, message);
        None
    }

    /// Reports each capability no connection fills, adds every capability
    /// to the graph, and returns those that checked.
    /// `any_broken_connection`: a syntax error may have lost a `fills`, so
    /// none is reported missing; nor is the `fills` of a capability whose
    /// declaration has an error (a body written in it, say).
    pub(crate) fn capabilities<'i>(
        &mut self,
        items: impl Iterator<Item = &'i Item>,
        fills: &mut Fills,
        any_broken_connection: bool,
        graph: &mut Graph,
    ) -> BTreeMap<String, Capability> {
        let mut out = BTreeMap::new();
        for item in items {
            let name = &item.name.name;
            let Some(&ix) = fills.first.get(name) else {
                if !any_broken_connection && !item.broken {
                    self.err(
                        Code::CapabilityUnfilled,
                        item.name.span,
                        format!(
                            "no connection fills capability `{name}`; add `fills {name} {{ call CONNECTION.post(\"/...\") }}` \
                             to the block of the connection that supplies it"
                        ),
                    );
                }
                graph.add_capability(name, Edges::default());
                continue;
            };
            let node = &mut fills.all[ix];
            graph.add_capability(name, node.edges.clone());
            let Some(sig) = self.sigs.get(name) else { continue };
            if item.broken || sig.lax {
                continue;
            }
            if let Some(body) = node.body.take() {
                out.insert(
                    name.clone(),
                    Capability {
                        name: name.clone(),
                        params: sig.params.clone(),
                        filler: node.filler.clone(),
                        body,
                        connections: BTreeSet::new(),
                        emits: BTreeSet::new(),
                        span: item.span,
                    },
                );
            }
        }
        out
    }

    /// `capability.call_outside` for each `run` in a `fills` body that may
    /// reach a connection other than the filler.
    pub(crate) fn calls_outside(&mut self, fills: &Fills, reach: &BTreeMap<String, Reach>) {
        for node in &fills.all {
            for (target, span) in &node.edges.runs {
                let Some(theirs) = reach.get(target) else { continue };
                let others: Vec<&String> = theirs.conns.iter().filter(|c| **c != node.filler).collect();
                if others.is_empty() {
                    continue;
                }
                // A hostile file must not make every message list thousands.
                let mut outside: Vec<String> = others.iter().take(NAMES_SHOWN).map(|c| format!("`{c}`")).collect();
                if others.len() > NAMES_SHOWN {
                    outside.push(format!("{} others", others.len() - NAMES_SHOWN));
                }
                self.err(
                    Code::CapabilityCallOutside,
                    *span,
                    format!(
                        "capability `{}` is filled by connection `{}`, so its `fills` body reaches only `{}`, \
                         but `{target}` may call {}; run `{target}` from the action that runs `{}` instead",
                        node.capability,
                        node.filler,
                        node.filler,
                        and_list(&outside),
                        node.capability
                    ),
                );
            }
        }
    }
}
