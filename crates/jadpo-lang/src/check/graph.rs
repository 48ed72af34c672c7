//! Actions running actions: cycles, the connections each action may call,
//! and `event` used inside actions, checked against the events of the
//! subscribers that reach them.
//!
//! The walk is iterative so a long chain of actions cannot overflow the
//! stack, and each action is visited once, so the work stays linear in the
//! size of the file.

use super::exprs::EventUse;
use super::items::Link;
use super::Checker;
use crate::diagnostic::{Code, Span};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// What one action's body refers to directly.
#[derive(Default)]
pub(crate) struct Edges {
    pub conns: BTreeSet<String>,
    pub runs: Vec<(String, Span)>,
    pub uses: Vec<EventUse>,
}

#[derive(Default)]
pub(crate) struct Graph {
    nodes: BTreeMap<String, Edges>,
    /// (subscriber or schedule name, what it runs)
    links: Vec<(String, Link)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// On the walk's current path.
    Open,
    Done,
}

impl Graph {
    pub fn add(&mut self, action: &str, edges: Edges) {
        self.nodes.insert(action.to_string(), edges);
    }

    pub fn link(&mut self, owner: &str, link: Option<Link>) {
        if let Some(link) = link {
            self.links.push((owner.to_string(), link));
        }
    }

    /// Reports `action.cycle`, `event.field_unknown` and
    /// `schedule.event_unavailable`; returns each action's connections,
    /// transitively.
    pub fn resolve(self, c: &mut Checker<'_>) -> BTreeMap<String, BTreeSet<String>> {
        // Every `event` use inside any action, by index, with its action.
        let mut all_uses: Vec<(&str, &EventUse)> = Vec::new();
        let mut own_uses: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (name, edges) in &self.nodes {
            for u in &edges.uses {
                own_uses.entry(name).or_default().push(all_uses.len());
                all_uses.push((name, u));
            }
        }

        let mut marks: BTreeMap<&str, Mark> = BTreeMap::new();
        let mut conns: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
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
                            let from = stack.iter().position(|(n, _)| *n == target).unwrap_or(0);
                            let mut names: Vec<&str> = stack[from..].iter().map(|(n, _)| *n).collect();
                            names.push(target);
                            let message = if names.len() == 2 {
                                format!("action `{target}` runs itself; remove this `run`")
                            } else {
                                format!(
                                    "actions run each other in a cycle, {}; remove one of these `run`s",
                                    names.join(" → ")
                                )
                            };
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
                let mut mine = edges.conns.clone();
                let mut used: BTreeSet<usize> = own_uses.get(node).into_iter().flatten().copied().collect();
                for (target, _) in &edges.runs {
                    if let Some(theirs) = conns.get(target) {
                        mine.extend(theirs.iter().cloned());
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

        // Many subscribers share an event and an action: check each use
        // against each event once.
        let mut checked: HashSet<(usize, &str)> = HashSet::new();
        for (owner, link) in &self.links {
            let Some(used) = reach.get(link.action.as_str()) else {
                continue;
            };
            match &link.event {
                Some(event) => {
                    for &ix in used {
                        let (_, u) = all_uses[ix];
                        if u.path.is_empty() || !checked.insert((ix, event.as_str())) {
                            continue;
                        }
                        c.event_field(event, &u.path, u.span, Some((owner, &link.action)));
                    }
                }
                None => {
                    if let Some(&ix) = used.iter().next() {
                        let (action, u) = all_uses[ix];
                        let line = c.line_of(u.span);
                        c.err(
                            Code::ScheduleEventUnavailable,
                            link.span,
                            format!(
                                "schedule `{owner}` runs `{}`, which uses `event` (action `{action}`, line {line}), \
                                 but a schedule has no event; pass the values as arguments instead",
                                link.action
                            ),
                        );
                    }
                }
            }
        }
        conns
    }
}
