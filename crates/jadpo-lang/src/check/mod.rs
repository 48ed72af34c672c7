//! The generic syntax tree to a checked [`App`], reporting every error.
//!
//! Names are collected first, so an item may refer to one declared later in
//! the file. An item with an error is still registered under its name, and
//! its broken parts are skipped, so one mistake is reported once rather than
//! again at every use.

mod actions;
mod alerts;
mod arguments;
mod capabilities;
mod connection;
mod emits;
mod exprs;
mod graph;
mod items;
mod publish;
mod routes;
mod stores;
mod values;

use crate::app::{
    Action, AlertRoute, App, Capability, Connection, Event, Field, Route, Schedule, StoreDecl, Subscriber,
};
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
        connection_drivers: BTreeMap::new(),
        store_names: BTreeSet::new(),
        sigs: BTreeMap::new(),
    };
    c.check_all(items)
}

/// An action's or a capability's parameters, known before any body is
/// checked so that calls can be checked in any order.
pub(crate) struct Sig {
    pub params: Vec<Field>,
    /// The parameter list had an error: argument counts are not checked
    /// against it, to report the mistake once.
    pub lax: bool,
    /// "action" or "capability", for messages.
    pub what: &'static str,
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
    /// Each connection's `driver:` as written, read before any body so a
    /// call can be checked against it; `None` when it is not a driver
    /// (reported once, at the connection).
    pub connection_drivers: BTreeMap<String, Option<connection::DriverName>>,
    pub store_names: BTreeSet<String>,
    /// Actions and capabilities, which share one namespace.
    pub sigs: BTreeMap<String, Sig>,
}

/// What the item-by-item check keeps of the first item of each name, and
/// what resolving the graph of runs and calls needs afterwards.
#[derive(Default)]
struct Parts {
    connections: BTreeMap<String, Connection>,
    actions: BTreeMap<String, Action>,
    subscribers: BTreeMap<String, Subscriber>,
    schedules: BTreeMap<String, Schedule>,
    routes: BTreeMap<String, Route>,
    route_paths: Vec<routes::RouteKey>,
    stores: Vec<StoreDecl>,
    fills: capabilities::Fills,
    alerts: Option<AlertRoute>,
    graph: graph::Graph,
}

impl Checker<'_> {
    pub(crate) fn err(&mut self, code: Code, span: Span, message: String) {
        self.diags.push(Diagnostic::new(code, span, message));
    }

    pub(crate) fn line_of(&self, span: Span) -> usize {
        self.lines.position(span.start).line
    }

    fn check_all(&mut self, items: &[Item]) -> Option<App> {
        let errors_before = self.diags.len();
        let firsts = self.first_of_each_name(items);
        self.declare_names(items, &firsts);
        let mut parts = Parts::default();
        for (i, item) in items.iter().enumerate() {
            self.check_item(item, firsts.contains(&i), &mut parts);
        }
        self.duplicate_route_paths(&parts.route_paths);

        let any_broken_connection = items
            .iter()
            .any(|item| item.broken && matches!(item.kind, ItemKind::Connection { .. }));
        let capability_items = items
            .iter()
            .enumerate()
            .filter(|(i, item)| firsts.contains(i) && matches!(item.kind, ItemKind::Capability { .. }))
            .map(|(_, item)| item);
        let mut capabilities = self.capabilities(
            capability_items,
            &mut parts.fills,
            any_broken_connection,
            &mut parts.graph,
        );

        let closure = parts.graph.resolve(self);
        let mut actions = parts.actions;
        record_reach(&closure, &mut actions, &mut capabilities);
        self.calls_outside(&parts.fills, &closure);
        self.emits_stay_in_their_store(&parts.subscribers, &parts.schedules, &parts.stores, |name| {
            actions
                .get(name)
                .map(|a| a.emits())
                .or_else(|| capabilities.get(name).map(|c| c.emits()))
        });

        if self.diags.len() > errors_before {
            return None;
        }
        Some(App {
            events: std::mem::take(&mut self.events),
            connections: parts.connections,
            actions,
            capabilities,
            subscribers: parts.subscribers,
            schedules: parts.schedules,
            routes: parts.routes,
            stores: parts.stores,
            alerts: parts.alerts,
        })
    }

    /// Registers what other items refer to by name (stores, events,
    /// connections, and the parameters of actions and capabilities) before
    /// any body is checked, so an item may use one declared after it.
    fn declare_names(&mut self, items: &[Item], firsts: &BTreeSet<usize>) {
        let is_first = |i: usize| firsts.contains(&i);
        // Events name their store, wherever it is declared.
        for (i, item) in items.iter().enumerate() {
            if matches!(item.kind, ItemKind::Store(_)) && is_first(i) {
                self.store_names.insert(item.name.name.clone());
            }
        }
        for (i, item) in items.iter().enumerate() {
            match &item.kind {
                ItemKind::Event { entries, store } => {
                    let (event, lax) = self.event(item, entries, store.as_ref());
                    if is_first(i) {
                        if lax || item.broken {
                            self.lax_events.insert(event.name.clone());
                        }
                        self.events.insert(event.name.clone(), event);
                    }
                }
                ItemKind::Connection { entries, .. } if is_first(i) => {
                    self.connection_names.insert(item.name.name.clone());
                    let driver = match entries.iter().find(|e| e.key.name == "driver") {
                        None => Some(connection::DriverName::Http),
                        Some(e) => connection::DriverName::written(&e.value),
                    };
                    self.connection_drivers.insert(item.name.name.clone(), driver);
                }
                ItemKind::Action { params, .. } | ItemKind::Capability { params } => {
                    let (params, lax) = self.params(params);
                    if is_first(i) {
                        let lax = lax || item.broken;
                        let what = kind_word(&item.kind);
                        self.sigs.insert(item.name.name.clone(), Sig { params, lax, what });
                    }
                }
                _ => {}
            }
        }
    }

    /// Checks one item's body. Every item is checked, so each of its
    /// mistakes is reported; only the first of a name (`first`) is kept.
    fn check_item(&mut self, item: &Item, first: bool, parts: &mut Parts) {
        match &item.kind {
            ItemKind::Event { .. } | ItemKind::Capability { .. } => {}
            ItemKind::Connection {
                entries,
                fills: written,
            } => {
                if let Some(conn) = self.connection(item, entries) {
                    if first {
                        parts.connections.insert(conn.name.clone(), conn);
                    }
                }
                self.fills(item, written, first, &mut parts.fills);
            }
            ItemKind::Action { uses, body, .. } => {
                let node = self.action(item, uses.as_deref(), body.as_deref());
                if first {
                    parts.graph.add(&item.name.name, node.edges);
                    if let Some(action) = node.action {
                        parts.actions.insert(action.name.clone(), action);
                    }
                }
            }
            ItemKind::Subscriber(entries) => {
                let (sub, link) = self.subscriber(item, entries);
                if first {
                    parts.graph.link(&item.name.name, link);
                    if let Some(sub) = sub {
                        parts.subscribers.insert(sub.name.clone(), sub);
                    }
                }
            }
            ItemKind::Schedule(entries) => {
                let (sched, link) = self.schedule(item, entries);
                if first {
                    parts.graph.link(&item.name.name, link);
                    if let Some(sched) = sched {
                        parts.schedules.insert(sched.name.clone(), sched);
                    }
                }
            }
            ItemKind::Route(entries) => {
                let checked = self.route(item, entries);
                if first {
                    parts.graph.link(&item.name.name, checked.link);
                    parts.route_paths.extend(checked.path);
                    if let Some(route) = checked.route {
                        parts.routes.insert(route.name.clone(), route);
                    }
                }
            }
            ItemKind::Store(entries) => {
                let store = self.store(item, entries);
                if first {
                    parts.stores.extend(store);
                }
            }
            ItemKind::Alerts(entries) => {
                let route = self.alerts(item, entries);
                if first {
                    parts.alerts = route;
                }
            }
        }
    }

    /// A delivery's emits are written in the transaction of its outcome, in
    /// its own event's store: reports `emit.store_mismatch` for a
    /// subscriber whose run may emit an event kept in another store, and
    /// for a schedule (run with the first store) whose run may emit one
    /// kept elsewhere.
    fn emits_stay_in_their_store<'a>(
        &mut self,
        subscribers: &BTreeMap<String, Subscriber>,
        schedules: &BTreeMap<String, Schedule>,
        stores: &[StoreDecl],
        emits_of: impl Fn(&str) -> Option<&'a BTreeSet<String>>,
    ) {
        let Some(first) = stores.first() else { return };
        let store_of = |event: &str| {
            self.events
                .get(event)
                .and_then(|e| e.store.clone())
                .unwrap_or_else(|| first.name.clone())
        };
        let mut found = Vec::new();
        for s in subscribers.values() {
            let home = store_of(&s.on);
            for emitted in emits_of(&s.run.action).into_iter().flatten() {
                let there = store_of(emitted);
                if there != home {
                    found.push((
                        s.run.span,
                        format!(
                            "subscriber `{}` runs for `{}`, kept in store `{home}`, but its",
                            s.name, s.on
                        ),
                        home.clone(),
                        emitted.clone(),
                        there,
                    ));
                }
            }
        }
        for s in schedules.values() {
            for emitted in emits_of(&s.run.action).into_iter().flatten() {
                let there = store_of(emitted);
                if there != first.name {
                    found.push((
                        s.run.span,
                        format!("schedule `{}` runs with the first store, but its", s.name),
                        first.name.clone(),
                        emitted.clone(),
                        there,
                    ));
                }
            }
        }
        for (span, who, home, emitted, there) in found {
            self.err(
                Code::EmitStoreMismatch,
                span,
                format!(
                    "{who} run may emit `{emitted}`, kept in store `{there}`; a run's emits are written in \
                     its own store (`{home}`): keep `{emitted}` in `{home}`, or emit it from a route"
                ),
            );
        }
    }

    /// Reports `name.duplicate` for every item whose name is taken by an
    /// earlier item of the same kind (`alerts.duplicate` for a second
    /// `alerts`, whose name is its keyword), and returns the indexes of the
    /// firsts.
    fn first_of_each_name(&mut self, items: &[Item]) -> BTreeSet<usize> {
        // The first of a name: its namespace's word, then the kind and span.
        let mut seen: BTreeMap<(&str, &str), (&str, Span)> = BTreeMap::new();
        let mut firsts = BTreeSet::new();
        for (i, item) in items.iter().enumerate() {
            let kind = kind_word(&item.kind);
            // Actions and capabilities are both run by name: one namespace.
            let space = if kind == "capability" { "action" } else { kind };
            match seen.get(&(space, item.name.name.as_str())).copied() {
                Some((_, first)) if matches!(item.kind, ItemKind::Alerts(_)) => {
                    let line = self.line_of(first);
                    self.err(
                        Code::AlertsDuplicate,
                        item.name.span,
                        format!(
                            "`alerts` is already declared on line {line}; an app has one `alerts` block: merge them or remove one"
                        ),
                    );
                }
                Some((first_kind, first)) if first_kind != kind => {
                    let line = self.line_of(first);
                    self.err(
                        Code::NameDuplicate,
                        item.name.span,
                        format!(
                            "{kind} `{}` has the name of the {first_kind} on line {line}; actions and capabilities \
                             share names, since `run` finds either: rename one of them",
                            item.name.name
                        ),
                    );
                }
                Some((_, first)) => {
                    let line = self.line_of(first);
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
                    seen.insert((space, &item.name.name), (kind, item.name.span));
                    firsts.insert(i);
                }
            }
        }
        firsts
    }

    /// The entries of a block by key, reporting unknown keys (`unknown`
    /// chooses the code) and repeated ones (`duplicate` chooses the code).
    /// The first of a repeated key wins.
    pub(crate) fn keyed<'e>(
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

    pub(crate) fn missing(&mut self, item: &Item, what: &str, key: &str, example: &str) {
        if !item.broken {
            self.err(
                Code::KeyMissing,
                item.name.span,
                format!("{what} needs `{key}:`, as in `{key}: {example}`"),
            );
        }
    }
}

/// Copies the resolved closure onto each action and capability: the
/// connections it may call and the events it may emit, through its runs.
fn record_reach(
    closure: &BTreeMap<String, graph::Reach>,
    actions: &mut BTreeMap<String, Action>,
    capabilities: &mut BTreeMap<String, Capability>,
) {
    for (name, action) in actions.iter_mut() {
        if let Some(reach) = closure.get(name) {
            action.connections = reach.conns.clone();
            action.emits = reach.emits.clone();
        }
    }
    for (name, cap) in capabilities.iter_mut() {
        if let Some(reach) = closure.get(name) {
            cap.connections = reach.conns.clone();
            cap.emits = reach.emits.clone();
        }
    }
}

pub(crate) fn kind_word(kind: &ItemKind) -> &'static str {
    match kind {
        ItemKind::Event { .. } => "event",
        ItemKind::Connection { .. } => "connection",
        ItemKind::Capability { .. } => "capability",
        ItemKind::Route(_) => "route",
        ItemKind::Store(_) => "store",
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
