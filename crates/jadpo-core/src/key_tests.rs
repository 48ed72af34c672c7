use super::*;
use crate::key::*;
use proptest::prelude::*;
use DeliveryState::*;

#[test]
fn a_key_is_a_string_or_an_int_of_at_most_256_bytes() {
    let cases: &[(KeyValue<'_>, Result<&str, KeyError>)] = &[
        (KeyValue::Str("c-42"), Ok("c-42")),
        (KeyValue::Int(42), Ok("42")),
        (KeyValue::Int(-7), Ok("-7")),
        (KeyValue::Str(" "), Ok(" ")),
        (KeyValue::Str(""), Err(KeyError::Empty)),
        (KeyValue::Missing, Err(KeyError::Missing)),
        (
            KeyValue::Other("float"),
            Err(KeyError::NotStringOrInt { found: "float" }),
        ),
        (
            KeyValue::Other("object"),
            Err(KeyError::NotStringOrInt { found: "object" }),
        ),
    ];
    for (value, want) in cases {
        assert_eq!(
            Key::new(*value).as_ref().map(Key::as_str).map_err(Clone::clone),
            want.clone(),
            "{value:?}"
        );
    }
    let longest = "é".repeat(MAX_KEY_BYTES / 2);
    assert_eq!(Key::new(KeyValue::Str(&longest)).unwrap().as_str().len(), MAX_KEY_BYTES);
    let over = format!("{longest}x");
    assert_eq!(
        Key::new(KeyValue::Str(&over)),
        Err(KeyError::TooLong {
            bytes: MAX_KEY_BYTES + 1
        })
    );
    // The same customer as a string and as an int is one key.
    assert_eq!(Key::new(KeyValue::Int(42)), Key::new(KeyValue::Str("42")));
}

#[test]
fn a_key_error_says_what_to_fix() {
    assert!(KeyError::TooLong { bytes: 300 }.to_string().contains("at most 256"));
    assert!(KeyError::NotStringOrInt { found: "bool" }
        .to_string()
        .contains("not bool"));
    assert!(CapOutOfRange(0).to_string().contains("from 1 to 1000, not 0"));
}

#[test]
fn concurrency_per_key_takes_1_to_1000() {
    assert_eq!(KeyRule::cap(1), Ok(KeyRule::Cap(1)));
    assert_eq!(KeyRule::cap(1000), Ok(KeyRule::Cap(1000)));
    for bad in [0, -1, 1001, i128::from(u32::MAX) + 1] {
        assert_eq!(KeyRule::cap(bad), Err(CapOutOfRange(bad)), "{bad}");
    }
}

/// Which states hold a key's slot, under each rule: the whole table.
#[test]
fn who_holds_a_slot() {
    let table: &[(DeliveryState, bool, bool, bool)] = &[
        // state       fifo   strict  cap
        (Queued, false, false, false),
        (Due, true, true, true),
        (Running, true, true, true),
        (Held, true, true, true),
        (Succeeded, false, false, false),
        (Failed, false, true, false),
        (Parked, false, true, false),
    ];
    assert_eq!(table.len(), DeliveryState::ALL.len());
    for &(state, fifo, strict, cap) in table {
        assert_eq!(KeyRule::Fifo.holds_slot(state), fifo, "fifo {state:?}");
        assert_eq!(KeyRule::Strict.holds_slot(state), strict, "strict {state:?}");
        assert_eq!(KeyRule::Cap(3).holds_slot(state), cap, "cap {state:?}");
    }
}

#[test]
fn a_retry_or_a_hold_keeps_the_slot_an_end_frees_it() {
    for rule in [KeyRule::Fifo, KeyRule::Strict, KeyRule::Cap(2)] {
        assert!(!rule.frees_slot(Running, Due), "{rule:?}: a retry keeps its place");
        assert!(!rule.frees_slot(Running, Held), "{rule:?}: a hold keeps its place");
        assert!(!rule.frees_slot(Held, Due), "{rule:?}: a release keeps its place");
        assert!(rule.frees_slot(Running, Succeeded), "{rule:?}");
    }
    assert!(KeyRule::Fifo.frees_slot(Running, Failed));
    assert!(KeyRule::Fifo.frees_slot(Running, Parked));
    assert!(
        !KeyRule::Strict.frees_slot(Running, Failed),
        "strict: the key waits for an operator"
    );
    assert!(!KeyRule::Strict.frees_slot(Running, Parked));
    // An operator's retry of an ended delivery takes a slot again, except
    // under strict, where it never gave it up.
    assert!(KeyRule::Fifo.takes_slot(Failed, Due));
    assert!(KeyRule::Cap(2).takes_slot(Parked, Due));
    assert!(!KeyRule::Strict.takes_slot(Failed, Due));
    assert_eq!(KeyRule::Fifo.slots(), 1);
    assert_eq!(KeyRule::Strict.slots(), 1);
    assert!(KeyRule::Strict.in_order() && KeyRule::Fifo.in_order() && !KeyRule::Cap(5).in_order());
    assert!(KeyRule::Cap(2).starts_due(1) && !KeyRule::Cap(2).starts_due(2));
    // A promotion takes the slot an end freed.
    assert!(KeyRule::Fifo.takes_slot(Queued, Due));
}

#[test]
fn a_rule_is_stored_as_text_and_read_back() {
    for rule in [KeyRule::Fifo, KeyRule::Strict, KeyRule::Cap(1), KeyRule::Cap(1000)] {
        assert_eq!(KeyRule::from_stored(&rule.stored()), Some(rule), "{rule:?}");
    }
    assert_eq!(KeyRule::Cap(7).stored(), "cap:7");
    for bad in ["", "FIFO", "cap:", "cap:0", "cap:1001", "cap:x", "cap:-1"] {
        assert_eq!(KeyRule::from_stored(bad), None, "{bad}");
    }
}

/// One key's deliveries as a store keeps them: a count of slots taken,
/// and a freed slot handed to the queued delivery with the lowest id. The
/// property tests drive it with any sequence of what can happen to a
/// delivery, and check the rules' promises after every step.
#[derive(Debug)]
struct Model {
    rule: KeyRule,
    /// By id, in emit order; `None` while queued.
    deliveries: Vec<Option<DeliveryState>>,
    taken: u32,
    /// Failed or parked deliveries an operator skipped: none holds a slot.
    skipped: std::collections::BTreeSet<usize>,
    /// The order in which deliveries first started running.
    started: Vec<usize>,
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Emit,
    /// The n-th delivery that can run starts.
    Run(usize),
    /// The n-th running delivery ends in this state (`Due`: a retry).
    End(usize, DeliveryState),
    Release(usize),
    /// An operator retries the n-th failed or parked delivery.
    Retry(usize),
    /// An operator skips the n-th failed or parked delivery.
    Skip(usize),
}

impl Model {
    fn new(rule: KeyRule) -> Model {
        Model {
            rule,
            deliveries: Vec::new(),
            taken: 0,
            skipped: Default::default(),
            started: Vec::new(),
        }
    }

    fn nth(&self, n: usize, pred: impl Fn(DeliveryState) -> bool) -> Option<usize> {
        let ids: Vec<usize> = (0..self.deliveries.len())
            .filter(|&i| self.deliveries[i].is_some_and(&pred))
            .collect();
        (!ids.is_empty()).then(|| ids[n % ids.len()])
    }

    fn promote(&mut self) {
        while self.rule.starts_due(self.taken) {
            let Some(next) = self.deliveries.iter().position(Option::is_none) else {
                return;
            };
            self.deliveries[next] = Some(Due);
            self.taken += 1;
        }
    }

    fn apply(&mut self, step: Step) {
        match step {
            Step::Emit => {
                if self.rule.starts_due(self.taken) {
                    self.taken += 1;
                    self.deliveries.push(Some(Due));
                } else {
                    self.deliveries.push(None);
                }
            }
            Step::Run(n) => {
                if let Some(i) = self.nth(n, |s| s == Due) {
                    if !self.started.contains(&i) {
                        self.started.push(i);
                    }
                    self.deliveries[i] = Some(Running);
                }
            }
            Step::End(n, to) => {
                if let Some(i) = self.nth(n, |s| s == Running) {
                    self.move_to(i, Running, to);
                }
            }
            Step::Release(n) => {
                if let Some(i) = self.nth(n, |s| s == Held) {
                    self.move_to(i, Held, Due);
                }
            }
            Step::Retry(n) => {
                if let Some(i) = self.nth(n, |s| matches!(s, Failed | Parked)) {
                    let from = self.deliveries[i].unwrap();
                    let skipped = self.skipped.remove(&i);
                    if skipped || self.rule.takes_slot(from, Due) {
                        if self.rule.starts_due(self.taken) {
                            self.taken += 1;
                            self.deliveries[i] = Some(Due);
                        } else {
                            self.deliveries[i] = None;
                        }
                    } else {
                        self.move_to(i, from, Due);
                    }
                }
            }
            Step::Skip(n) => {
                let skippable: Vec<usize> = (0..self.deliveries.len())
                    .filter(|i| matches!(self.deliveries[*i], Some(Failed | Parked)) && !self.skipped.contains(i))
                    .collect();
                if !skippable.is_empty() {
                    let i = skippable[n % skippable.len()];
                    self.skipped.insert(i);
                    if self.rule.holds_slot(self.deliveries[i].unwrap()) {
                        self.taken -= 1;
                        self.promote();
                    }
                }
            }
        }
    }

    fn move_to(&mut self, i: usize, from: DeliveryState, to: DeliveryState) {
        self.deliveries[i] = Some(to);
        if self.rule.frees_slot(from, to) {
            self.taken -= 1;
            self.promote();
        }
    }

    fn check(&self) -> Result<(), TestCaseError> {
        let holding = (0..self.deliveries.len())
            .filter(|i| !self.skipped.contains(i))
            .filter(|i| self.deliveries[*i].is_some_and(|s| self.rule.holds_slot(s)))
            .count() as u32;
        prop_assert_eq!(holding, self.taken, "the count is the deliveries holding a slot");
        prop_assert!(self.taken <= self.rule.slots(), "never more than the key's slots");
        let queued = self.deliveries.iter().filter(|d| d.is_none()).count();
        if queued > 0 {
            prop_assert_eq!(self.taken, self.rule.slots(), "nothing waits while a slot is free");
        }
        Ok(())
    }

    /// Every delivery that may run is older than every queued one: true
    /// until an operator retries an ended delivery, which then waits (or
    /// runs) among later ones.
    fn check_order(&self) -> Result<(), TestCaseError> {
        if let Some(q) = self.deliveries.iter().position(Option::is_none) {
            for (i, d) in self.deliveries.iter().enumerate() {
                if matches!(d, Some(Due | Running | Held)) {
                    prop_assert!(i < q, "delivery {} may run ahead of queued {}", i, q);
                }
            }
        }
        Ok(())
    }
}

fn step() -> impl Strategy<Value = Step> {
    let end = prop_oneof![Just(Due), Just(Held), Just(Succeeded), Just(Failed), Just(Parked)];
    prop_oneof![
        3 => Just(Step::Emit),
        3 => any::<usize>().prop_map(Step::Run),
        3 => (any::<usize>(), end).prop_map(|(n, s)| Step::End(n, s)),
        1 => any::<usize>().prop_map(Step::Release),
        1 => any::<usize>().prop_map(Step::Retry),
        1 => any::<usize>().prop_map(Step::Skip),
    ]
}

fn rule() -> impl Strategy<Value = KeyRule> {
    prop_oneof![
        Just(KeyRule::Fifo),
        Just(KeyRule::Strict),
        (1u32..4).prop_map(KeyRule::Cap)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// After every step: the count matches, no key is over its slots, a
    /// free slot never leaves a delivery queued.
    #[test]
    fn the_slots_are_counted_and_never_exceeded(rule in rule(), steps in prop::collection::vec(step(), 0..60)) {
        let mut m = Model::new(rule);
        for s in steps {
            m.apply(s);
            m.check()?;
        }
    }

    /// Without an operator's retry, `fifo` and `strict` start a key's
    /// deliveries in emit order, one at a time.
    #[test]
    fn fifo_and_strict_start_in_emit_order(
        strict in any::<bool>(),
        steps in prop::collection::vec(step().prop_filter("no operator retry", |s| !matches!(s, Step::Retry(_))), 0..80),
    ) {
        let mut m = Model::new(if strict { KeyRule::Strict } else { KeyRule::Fifo });
        for s in steps {
            m.apply(s);
            m.check()?;
            m.check_order()?;
            let live = m.deliveries.iter().flatten().filter(|s| matches!(s, Due | Running | Held)).count();
            prop_assert!(live <= 1, "one at a time");
        }
        let mut sorted = m.started.clone();
        sorted.sort_unstable();
        prop_assert_eq!(&m.started, &sorted, "started in emit order");
    }

    /// Under `strict`, a delivery that failed or was parked stops its key
    /// until an operator acts; under `fifo` it does not.
    #[test]
    fn strict_stops_at_a_failure_fifo_goes_on(strict in any::<bool>(), ending in prop_oneof![Just(Failed), Just(Parked)], later in 1usize..5) {
        let mut m = Model::new(if strict { KeyRule::Strict } else { KeyRule::Fifo });
        for _ in 0..=later {
            m.apply(Step::Emit);
        }
        m.apply(Step::Run(0));
        m.apply(Step::End(0, ending));
        m.check()?;
        let next_due = m.deliveries[1] == Some(Due);
        prop_assert_eq!(next_due, !strict);
        m.apply(Step::Retry(0));
        m.check()?;
        if strict {
            prop_assert_eq!(m.deliveries[0], Some(Due), "the retried one runs again at once");
            m.apply(Step::Run(0));
            m.apply(Step::End(0, Succeeded));
            prop_assert_eq!(m.deliveries[1], Some(Due), "and its success frees the key");
        } else {
            prop_assert_eq!(m.deliveries[0], None, "the retried one waits behind the key's head");
        }
    }

    /// An operator's skip moves a `strict` key on past its failure, as a
    /// `fifo` key moves on by itself; retried after, the skipped one waits
    /// behind the key's head.
    #[test]
    fn a_skip_moves_a_strict_key_on(ending in prop_oneof![Just(Failed), Just(Parked)], later in 1usize..5) {
        let mut m = Model::new(KeyRule::Strict);
        for _ in 0..=later {
            m.apply(Step::Emit);
        }
        m.apply(Step::Run(0));
        m.apply(Step::End(0, ending));
        prop_assert_eq!(m.deliveries[1], None, "the key waits for the operator");
        m.apply(Step::Skip(0));
        m.check()?;
        prop_assert_eq!(m.deliveries[1], Some(Due), "the skip hands the key on");
        prop_assert_eq!(m.deliveries[0], Some(ending), "the skipped one keeps its state");
        m.apply(Step::Retry(0));
        m.check()?;
        prop_assert_eq!(m.deliveries[0], None, "retried, it waits behind the key's head");
    }

    /// With every delivery run to success, every delivery of the key ends:
    /// nothing stays queued.
    #[test]
    fn run_to_success_everything_ends(rule in rule(), n in 0usize..40) {
        let mut m = Model::new(rule);
        for _ in 0..n {
            m.apply(Step::Emit);
        }
        for _ in 0..n {
            m.apply(Step::Run(0));
            m.apply(Step::End(0, Succeeded));
            m.check()?;
        }
        prop_assert!(m.deliveries.iter().all(|d| *d == Some(Succeeded)));
        prop_assert_eq!(m.taken, 0);
    }
}
