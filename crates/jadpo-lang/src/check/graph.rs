//! Actions and capabilities running each other: cycles, the connections
//! each may call and the events each may emit, and `event` used inside
//! them, checked against the events of the subscribers that reach them.
//!
//! The walk is iterative so a long chain of actions cannot overflow the
//! stack, and each action is visited once, so the work stays linear in the
//! size of the file.

use super::exprs::EventUse;
use super::items::{Link, Source};
use super::Checker;
use crate::diagnostic::{Code, Span};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// What one action's body (or capability's `fills` body) refers to
/// directly.
#[derive(Clone, Default)]
pub(crate) struct Edges {
    pub conns: BTreeSet<String>,
    pub runs: Vec<(String, Span)>,
    pub uses: Vec<EventUse>,
    pub emits: BTreeSet<String>,
}

/// What an action or capability reaches, itself and through what it runs.
#[derive(Clone, Default)]
pub(crate) struct Reach {
    pub conns: BTreeSet<String>,
    pub emits: BTreeSet<String>,
}

#[derive(Default)]
pub(crate) struct Graph {
    nodes: BTreeMap<String, Edges>,
    /// The nodes that are capabilities, for messages.
    caps: BTreeSet<String>,
    /// (subscriber, schedule or route name, what it runs)
    links: Vec<(String, Link)>,
}

/// Every `event` use inside any action or capability, by index, with its
/// owner; and the indexes of each one's own uses.
#[derive(Default)]
struct EventUses<'g> {
    all: Vec<(&'g str, &'g EventUse)>,
    own: BTreeMap<&'g str, Vec<usize>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// On the walk's current path.
    Open,
    Done,
}

impl Graph {
    pub(crate) fn add(&mut self, action: &str, edges: Edges) {
        self.nodes.insert(action.to_string(), edges);
    }

    pub(crate) fn add_capability(&mut self, capability: &str, edges: Edges) {
        self.caps.insert(capability.to_string());
        self.add(capability, edges);
    }

    fn what(&self, node: &str) -> &'static str {
        if self.caps.contains(node) {
            "capability"
        } else {
            "action"
        }
    }

    pub(crate) fn link(&mut self, owner: &str, link: Option<Link>) {
        if let Some(link) = link {
            self.links.push((owner.to_string(), link));
        }
    }

    /// Reports `action.cycle`, `event.field_unknown`,
    /// `schedule.event_unavailable` and `route.event_unavailable`; returns
    /// what each action and capability reaches, transitively.
    pub(crate) fn resolve(self, c: &mut Checker<'_>) -> BTreeMap<String, Reach> {
        let uses = self.event_uses();
        let (reach, uses_reached) = self.follow_runs(c, &uses.own);
        self.check_event_uses(c, &uses.all, &uses_reached);
        reach
    }

    fn event_uses(&self) -> EventUses<'_> {
        let mut uses = EventUses::default();
        for (name, edges) in &self.nodes {
            for u in &edges.uses {
                uses.own.entry(name).or_default().push(uses.all.len());
                uses.all.push((name, u));
            }
        }
        uses
    }

    /// Walks every `run`, reporting `action.cycle`; returns what each
    /// action and capability reaches, and the indexes of the `event` uses
    /// each reaches, its own and its callees'.
    fn follow_runs<'g>(
        &'g self,
        c: &mut Checker<'_>,
        own_uses: &BTreeMap<&str, Vec<usize>>,
    ) -> (BTreeMap<String, Reach>, BTreeMap<&'g str, BTreeSet<usize>>) {
        let mut marks: BTreeMap<&str, Mark> = BTreeMap::new();
        let mut conns: BTreeMap<String, Reach> = BTreeMap::new();
        let mut reach: BTreeMap<&str, BTreeSet<usize>> = BTreeMap::new();
        for root in self.nodes.keys() {
            if marks.contains_key(root.as_str()) {
                continue;
            }
            // (action, index of its next `run` to follow)
            let mut stack: Vec<(&str, usize)> = vec![(root, 0)];
            marks.insert(root, Mark::Open);
            while let Some(&mut (node, ref mut next)) = stack.last_mut() {
                let edges = &self.nodes[node];
                if let Some((target, span)) = edges.runs.get(*next) {
                    *next += 1;
                    let Some((target, _)) = self.nodes.get_key_value(target) else {
                        continue; // unknown action, already reported
                    };
                    match marks.get(target.as_str()) {
                        Some(Mark::Open) => {
                            let message = self.cycle_message(&stack, target);
                            c.err(Code::ActionCycle, *span, message);
                        }
                        Some(Mark::Done) => {}
                        None => {
                            marks.insert(target, Mark::Open);
                            stack.push((target, 0));
                        }
                    }
                    continue;
                }
                // All runs followed: what this action reaches is its own and
                // its callees'. A callee still open is on a reported cycle.
                let mut mine = Reach {
                    conns: edges.conns.clone(),
                    emits: edges.emits.clone(),
                };
                let mut used: BTreeSet<usize> = own_uses.get(node).into_iter().flatten().copied().collect();
                for (target, _) in &edges.runs {
                    if let Some(theirs) = conns.get(target) {
                        mine.conns.extend(theirs.conns.iter().cloned());
                        mine.emits.extend(theirs.emits.iter().cloned());
                    }
                    if let Some(theirs) = reach.get(target.as_str()) {
                        used.extend(theirs);
                    }
                }
                conns.insert(node.to_string(), mine);
                reach.insert(node, used);
                marks.insert(node, Mark::Done);
                stack.pop();
            }
        }
        (conns, reach)
    }

    /// The `action.cycle` message for a `run` of `target`, which is open on
    /// the walk's `stack`: the cycle is the stack from `target` on.
    fn cycle_message(&self, stack: &[(&str, usize)], target: &str) -> String {
        let from = stack.iter().position(|(n, _)| *n == target).unwrap_or(0);
        let mut names: Vec<&str> = stack[from..].iter().map(|(n, _)| *n).collect();
        names.push(target);
        if names.len() == 2 {
            format!("{} `{target}` runs itself; remove this `run`", self.what(target))
        } else if names.iter().any(|n| self.caps.contains(*n)) {
            format!(
                "actions and capabilities run each other in a cycle, {}; remove one of these `run`s",
                names.join(" → ")
            )
        } else {
            format!(
                "actions run each other in a cycle, {}; remove one of these `run`s",
                names.join(" → ")
            )
        }
    }

    /// Checks the `event` uses each subscriber, schedule and route reaches
    /// against what starts it: a subscriber's event has the field, a
    /// schedule or route has no event at all.
    fn check_event_uses(
        &self,
        c: &mut Checker<'_>,
        all_uses: &[(&str, &EventUse)],
        reach: &BTreeMap<&str, BTreeSet<usize>>,
    ) {
        // Many subscribers share an event and an action: check each use
        // against each event once.
        let mut checked: HashSet<(usize, &str)> = HashSet::new();
        for (owner, link) in &self.links {
            let Some(used) = reach.get(link.action.as_str()) else {
                continue;
            };
            match &link.source {
                Source::Event(event) => {
                    for &ix in used {
                        let (_, u) = all_uses[ix];
                        if u.path.is_empty() || !checked.insert((ix, event.as_str())) {
                            continue;
                        }
                        c.event_field(event, "event", &u.path, u.span, Some((owner, &link.action)));
                    }
                }
                Source::Schedule | Source::Route => {
                    if let Some(&ix) = used.iter().next() {
                        let (action, u) = all_uses[ix];
                        self.event_unavailable(c, owner, link, action, u);
                    }
                }
            }
        }
    }

    /// `route.event_unavailable` or `schedule.event_unavailable`: what
    /// `owner` runs uses `event` (`u`, in `action`), which it has none of.
    fn event_unavailable(&self, c: &mut Checker<'_>, owner: &str, link: &Link, action: &str, u: &EventUse) {
        let line = c.line_of(u.span);
        let what = self.what(action);
        let (code, owner_kind, instead) = match link.source {
            Source::Route => (
                Code::RouteEventUnavailable,
                "route",
                "pass `path.NAME`, `input` or `input.FIELD` as arguments instead",
            ),
            _ => (
                Code::ScheduleEventUnavailable,
                "schedule",
                "pass the values as arguments instead",
            ),
        };
        c.err(
            code,
            link.span,
            format!(
                "{owner_kind} `{owner}` runs `{}`, which uses `event` ({what} `{action}`, line {line}), \
                 but a {owner_kind} has no event; {instead}",
                link.action
            ),
        );
    }
}
