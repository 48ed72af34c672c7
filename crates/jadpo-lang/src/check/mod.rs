//! The generic syntax tree to a checked [`App`], reporting every error.
//!
//! Names are collected first, so an item may refer to one declared later in
//! the file. An item with an error is still registered under its name, and
//! its broken parts are skipped, so one mistake is reported once rather than
//! again at every use.

mod actions;
mod alerts;
mod connection;
mod exprs;
mod graph;
mod items;
mod values;

use crate::app::{App, Event, Field};
use crate::diagnostic::{Code, Diagnostic, LineIndex, Span};
use crate::syntax::{Entry, Item, ItemKind};
use std::collections::{BTreeMap, BTreeSet};

pub(crate) fn check_items(src: &str, items: &[Item], diags: &mut Vec<Diagnostic>) -> Option<App> {
    let mut c = Checker {
        src,
        lines: LineIndex::new(src),
        diags,
        events: BTreeMap::new(),
        lax_events: BTreeSet::new(),
        connection_names: BTreeSet::new(),
        sigs: BTreeMap::new(),
    };
    c.check_all(items)
}

/// An action's parameters, known before any body is checked so that calls
/// can be checked in any order.
pub(crate) struct Sig {
    pub params: Vec<Field>,
    /// The parameter list had an error: argument counts are not checked
    /// against it, to report the mistake once.
    pub lax: bool,
}

pub(crate) struct Checker<'a> {
    pub src: &'a str,
    lines: LineIndex<'a>,
    diags: &'a mut Vec<Diagnostic>,
    pub events: BTreeMap<String, Event>,
    /// Events with a field that failed to check: `event.FIELD` is not
    /// reported unknown for them, the field may be the one that failed.
    pub lax_events: BTreeSet<String>,
    pub connection_names: BTreeSet<String>,
    pub sigs: BTreeMap<String, Sig>,
}

impl Checker<'_> {
    pub fn err(&mut self, code: Code, span: Span, message: String) {
        self.diags.push(Diagnostic::new(code, span, message));
    }

    pub fn line_of(&self, span: Span) -> usize {
        self.lines.position(span.start).line
    }

    fn check_all(&mut self, items: &[Item]) -> Option<App> {
        let errors_before = self.diags.len();
        let firsts = self.first_of_each_name(items);
        let is_first = |i: usize| firsts.contains(&i);

        let mut connections = BTreeMap::new();
        for (i, item) in items.iter().enumerate() {
            match &item.kind {
                ItemKind::Event(entries) => {
                    let (event, lax) = self.event(item, entries);
                    if is_first(i) {
                        if lax || item.broken {
                            self.lax_events.insert(event.name.clone());
                        }
                        self.events.insert(event.name.clone(), event);
                    }
                }
                ItemKind::Connection(_) if is_first(i) => {
                    self.connection_names.insert(item.name.name.clone());
                }
                ItemKind::Action { params, .. } => {
                    let (params, lax) = self.params(params);
                    if is_first(i) {
                        let lax = lax || item.broken;
                        self.sigs.insert(item.name.name.clone(), Sig { params, lax });
                    }
                }
                _ => {}
            }
        }

        let mut actions = BTreeMap::new();
        let mut subscribers = BTreeMap::new();
        let mut schedules = BTreeMap::new();
        let mut alerts = None;
        let mut graph = graph::Graph::default();
        for (i, item) in items.iter().enumerate() {
            match &item.kind {
                ItemKind::Event(_) => {}
                ItemKind::Connection(entries) => {
                    if let Some(conn) = self.connection(item, entries) {
                        if is_first(i) {
                            connections.insert(conn.name.clone(), conn);
                        }
                    }
                }
                ItemKind::Action { uses, body, .. } => {
                    let node = self.action(item, uses.as_deref(), body.as_deref());
                    if is_first(i) {
                        graph.add(&item.name.name, node.edges);
                        if let Some(action) = node.action {
                            actions.insert(action.name.clone(), action);
                        }
                    }
                }
                ItemKind::Subscriber(entries) => {
                    let (sub, link) = self.subscriber(item, entries);
                    if is_first(i) {
                        graph.link(&item.name.name, link);
                        if let Some(sub) = sub {
                            subscribers.insert(sub.name.clone(), sub);
                        }
                    }
                }
                ItemKind::Schedule(entries) => {
                    let (sched, link) = self.schedule(item, entries);
                    if is_first(i) {
                        graph.link(&item.name.name, link);
                        if let Some(sched) = sched {
                            schedules.insert(sched.name.clone(), sched);
                        }
                    }
                }
                ItemKind::Alerts(entries) => {
                    let route = self.alerts(item, entries);
                    if is_first(i) {
                        alerts = route;
                    }
                }
            }
        }

        let closure = graph.resolve(self);
        for (name, action) in actions.iter_mut() {
            if let Some(conns) = closure.get(name) {
                action.connections = conns.clone();
            }
        }

        if self.diags.len() > errors_before {
            return None;
        }
        Some(App {
            events: std::mem::take(&mut self.events),
            connections,
            actions,
            subscribers,
            schedules,
            alerts,
        })
    }

    /// Reports `name.duplicate` for every item whose name is taken by an
    /// earlier item of the same kind (`alerts.duplicate` for a second
    /// `alerts`, whose name is its keyword), and returns the indexes of the
    /// firsts.
    fn first_of_each_name(&mut self, items: &[Item]) -> BTreeSet<usize> {
        let mut seen: BTreeMap<(&str, &str), Span> = BTreeMap::new();
        let mut firsts = BTreeSet::new();
        for (i, item) in items.iter().enumerate() {
            let kind = kind_word(&item.kind);
            match seen.get(&(kind, item.name.name.as_str())) {
                Some(first) if matches!(item.kind, ItemKind::Alerts(_)) => {
                    let line = self.line_of(*first);
                    self.err(
                        Code::AlertsDuplicate,
                        item.name.span,
                        format!(
                            "`alerts` is already declared on line {line}; an app has one `alerts` block: merge them or remove one"
                        ),
                    );
                }
                Some(first) => {
                    let line = self.line_of(*first);
                    self.err(
                        Code::NameDuplicate,
                        item.name.span,
                        format!(
                            "{kind} `{}` is already declared on line {line}; rename or remove one of them",
                            item.name.name
                        ),
                    );
                }
                None => {
                    seen.insert((kind, &item.name.name), item.name.span);
                    firsts.insert(i);
                }
            }
        }
        firsts
    }

    /// The entries of a block by key, reporting unknown keys (`unknown`
    /// chooses the code) and repeated ones (`duplicate` chooses the code).
    /// The first of a repeated key wins.
    pub fn keyed<'e>(
        &mut self,
        what: &str,
        entries: &'e [Entry],
        allowed: &[&str],
        unknown: Code,
        duplicate: Code,
    ) -> BTreeMap<&'e str, &'e Entry> {
        let mut map: BTreeMap<&str, &Entry> = BTreeMap::new();
        for entry in entries {
            let key = entry.key.name.as_str();
            if !allowed.contains(&key) {
                let hint = match suggest(key, allowed.iter().copied()) {
                    Some(s) => format!("did you mean `{s}:`?"),
                    None => format!("it takes {}", list_keys(allowed)),
                };
                self.err(unknown, entry.key.span, format!("{what} has no key `{key}:`; {hint}"));
            } else if map.contains_key(key) {
                self.err(
                    duplicate,
                    entry.key.span,
                    format!("`{key}:` is given twice in {what}; keep one"),
                );
            } else {
                map.insert(key, entry);
            }
        }
        map
    }

    pub fn missing(&mut self, item: &Item, what: &str, key: &str, example: &str) {
        if !item.broken {
            self.err(
                Code::KeyMissing,
                item.name.span,
                format!("{what} needs `{key}:`, as in `{key}: {example}`"),
            );
        }
    }
}

pub(crate) fn kind_word(kind: &ItemKind) -> &'static str {
    match kind {
        ItemKind::Event(_) => "event",
        ItemKind::Connection(_) => "connection",
        ItemKind::Subscriber(_) => "subscriber",
        ItemKind::Schedule(_) => "schedule",
        ItemKind::Alerts(_) => "alerts",
        ItemKind::Action { .. } => "action",
    }
}

fn list_keys(keys: &[&str]) -> String {
    let keys: Vec<String> = keys.iter().map(|k| format!("`{k}:`")).collect();
    and_list(&keys)
}

/// "a", "a and b", "a, b and c".
pub(crate) fn and_list(items: &[String]) -> String {
    match items.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => items.concat(),
    }
}

/// The closest candidate within a small edit distance, for "did you mean".
pub(crate) fn suggest<'c>(name: &str, candidates: impl Iterator<Item = &'c str>) -> Option<&'c str> {
    // Short names are too close to everything for a guess to help.
    let limit = (name.chars().count() / 3).min(3);
    if limit == 0 {
        return None;
    }
    candidates
        .filter(|c| *c != name)
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_lowercase().chars().collect();
    let b: Vec<char> = b.to_lowercase().chars().collect();
    if a.len().abs_diff(b.len()) > 3 {
        return usize::MAX;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// "did you mean `x`?" or the fallback.
pub(crate) fn hint<'c>(
    name: &str,
    candidates: impl Iterator<Item = &'c str>,
    fallback: impl FnOnce() -> String,
) -> String {
    match suggest(name, candidates) {
        Some(s) => format!("did you mean `{s}`?"),
        None => fallback(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_are_close_names_only() {
        let names = ["PaymentReceived", "RefundIssued"];
        assert_eq!(suggest("PaymentRecieved", names.into_iter()), Some("PaymentReceived"));
        assert_eq!(suggest("Shipment", names.into_iter()), None);
        assert_eq!(suggest("attempt", ["attempts", "within"].into_iter()), Some("attempts"));
    }
}
