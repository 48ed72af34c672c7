use super::*;
use proptest::prelude::*;

#[test]
fn the_userinfo_password_is_hidden_whatever_it_holds() {
    for (url, shown) in [
        ("postgres://u:hunter2@h:5432/db", "postgres://u:***@h:5432/db"),
        ("postgresql://u:p@q@h/db?x=1", "postgresql://u:***@h/db?x=1"),
        ("postgres://u:pa/ss?wo#rd@h/db", "postgres://u:***@h/db"),
        ("postgres://u:a:b:c@h/db", "postgres://u:***@h/db"),
        ("postgres://u:hun%40ter%2F2@h/db", "postgres://u:***@h/db"),
        ("postgres://u:pässwörd密@h/db", "postgres://u:***@h/db"),
        ("postgres://:hunter2@h/db", "postgres://:***@h/db"),
        ("postgres://u:hunter2@[::1]:5432/db", "postgres://u:***@[::1]:5432/db"),
        (
            "postgres://u:hunter2@h1:5432,h2:5433/db",
            "postgres://u:***@h1:5432,h2:5433/db",
        ),
        ("postgres://u:hunter2@h:notaport/db", "postgres://u:***@h:notaport/db"),
        ("mysql://root:hunter2@h/db", "mysql://root:***@h/db"),
        ("redis://:hunter2@h", "redis://:***@h"),
    ] {
        assert_eq!(redact_url(url), shown, "{url}");
    }
}

#[test]
fn a_password_parameter_is_hidden_in_any_case_and_encoding() {
    for (url, shown) in [
        ("postgres://u@h/db?password=hunter2", "postgres://u@h/db?password=***"),
        (
            "postgres://u@127.0.0.1:5432/db?sslmode=bogus&password=hunter2",
            "postgres://u@127.0.0.1:5432/db?sslmode=bogus&password=***",
        ),
        (
            "postgres://u@h/db?password=hunter2&application_name=x",
            "postgres://u@h/db?password=***&application_name=x",
        ),
        ("postgres://u@h/db?PassWord=hunter2", "postgres://u@h/db?PassWord=***"),
        ("postgres://u@h/db?PASSWORD=hunter2", "postgres://u@h/db?PASSWORD=***"),
        (
            "postgres://u@h/db?%70assword=hunter2",
            "postgres://u@h/db?%70assword=***",
        ),
        (
            "postgres://u@h/db?pass%77ord=hunter2",
            "postgres://u@h/db?pass%77ord=***",
        ),
        (
            "postgres://u@h/db?sslpassword=hunter2",
            "postgres://u@h/db?sslpassword=***",
        ),
        (
            "postgres://u@h/db?password=a/b?c#d:e%26f",
            "postgres://u@h/db?password=***",
        ),
        (
            "postgres://u:one@h/db?password=two",
            "postgres://u:***@h/db?password=***",
        ),
        // A raw `@` in the parameter: the driver would read the text up to
        // it as credentials, so all of it goes.
        ("postgres://u@h:5432/db?password=p@ss", "postgres://u@h:***"),
        ("postgres://u@h/db?password=", "postgres://u@h/db?password="),
    ] {
        assert_eq!(redact_url(url), shown, "{url}");
    }
}

#[test]
fn a_key_value_string_loses_its_password() {
    for (s, shown) in [
        ("host=h password=hunter2 dbname=db", "host=h password=*** dbname=db"),
        ("password=hunter2", "password=***"),
        ("host=h PASSWORD = hunter2", "host=h PASSWORD = ***"),
        (
            r"host=h password='hun ter\'2' port=5432",
            "host=h password='***' port=5432",
        ),
        (r"host=h password=hun\ ter2 port=5432", "host=h password=*** port=5432"),
        ("host=h password='unterminated", "host=h password='***"),
        (
            "host=h:5432 user=me@corp dbname=db",
            "host=h:5432 user=me@corp dbname=db",
        ),
        ("host=h user=u", "host=h user=u"),
    ] {
        assert_eq!(redact_url(s), shown, "{s}");
    }
}

#[test]
fn a_mistyped_scheme_still_hides_the_password() {
    assert_eq!(redact_url("postgres:u:hunter2@h/db"), "postgres:***@h/db");
    assert_eq!(redact_url("postgres//u:hunter2@h/db"), "postgres//u:***@h/db");
    assert_eq!(redact_url("u:hunter2@h"), "u:***@h");
}

#[test]
fn urls_without_a_password_are_unchanged() {
    for url in [
        "postgres://u@h/db",
        "postgres://u@h:5432/db?sslmode=disable&application_name=jadpo",
        "postgres://h:5432/db",
        "postgresql:///db?host=/var/run/postgresql",
        "postgres://u:@h/db",
        "postgres://u@h/db?options=-c%20search_path%3Dx",
        "postgres://[::1]:5432/db",
        "sqlite:a.db",
        "sqlite:.jadpo/jadpo.db",
        "sqlite:/home/me@corp:x/a.db",
        "sqlite:///abs/a.db",
        "mysql://h/db",
        "just-a-path.db",
        "",
    ] {
        assert_eq!(redact_url(url), url);
    }
}

/// Over-hiding, never under-hiding: the driver reads the text up to an `@`
/// as credentials, so a URL whose query holds one loses what is before it.
#[test]
fn an_at_sign_later_in_the_url_hides_more_not_less() {
    assert_eq!(
        redact_url("postgres://h:5432/db?application_name=a@b"),
        "postgres://h:***@b"
    );
}

// The generators. A password is 4 to 12 characters: letters and digits,
// the characters that end a URL's parts or a parameter (`/ ? # @ : % & =`),
// quotes, `\`, spaces, non-ASCII, and any character at all (`*`, the mask's
// own, left out: a password of stars would be found in the mask).

fn password() -> impl Strategy<Value = String> {
    let c = prop_oneof![
        4 => proptest::char::range('a', 'z'),
        1 => proptest::char::range('A', 'Z'),
        1 => proptest::char::range('0', '9'),
        3 => proptest::sample::select(vec!['/', '?', '#', '@', ':', '%', '&', '=', ' ', '+', '\'', '\\', '"', '!', '$', ',']),
        1 => proptest::sample::select(vec!['é', 'ß', 'ж', '密', '🔑']),
        1 => any::<char>().prop_filter("not the mask", |c| *c != '*'),
    ];
    proptest::collection::vec(c, 4..12).prop_map(|v| v.into_iter().collect())
}

/// Every byte but RFC 3986's unreserved characters as `%XX`.
fn percent_encoded(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The password as a URL carries it: as typed (`Raw`), with only what would
/// end it escaped (`Minimal`), or every byte but the unreserved escaped.
#[derive(Clone, Copy, Debug)]
enum Encoding {
    Raw,
    Minimal,
    Full,
}

fn encoding() -> impl Strategy<Value = Encoding> {
    prop_oneof![Just(Encoding::Raw), Just(Encoding::Minimal), Just(Encoding::Full)]
}

fn placed(pw: &str, e: Encoding, in_query: bool) -> String {
    match e {
        // A raw `&` would end a parameter: the user must escape it there.
        Encoding::Raw if !in_query => pw.to_owned(),
        Encoding::Raw | Encoding::Minimal => {
            let mut out = String::new();
            for c in pw.chars() {
                match c {
                    '&' => out.push_str("%26"),
                    '%' => out.push_str("%25"),
                    c => out.push(c),
                }
            }
            out
        }
        Encoding::Full => percent_encoded(pw),
    }
}

fn scheme() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("postgres"), Just("postgresql")]
}

fn hosts(at_signs: bool) -> impl Strategy<Value = String> {
    let name = if at_signs {
        "[a-z0-9.@-]{1,12}"
    } else {
        "[a-z0-9.-]{1,12}"
    };
    let host = (
        prop_oneof![name.prop_map(|s| s), Just("[::1]".to_owned())],
        prop_oneof![
            Just(String::new()),
            "[0-9]{1,5}".prop_map(|p| format!(":{p}")),
            "[a-z]{1,6}".prop_map(|p| format!(":{p}"))
        ],
    )
        .prop_map(|(h, p)| format!("{h}{p}"));
    proptest::collection::vec(host, 1..3).prop_map(|v| v.join(","))
}

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-zA-Z0-9_%.-]{0,10}".prop_map(|d| format!("/{d}"))
    ]
}

/// Parameters whose names are not a password's.
fn params(at_signs: bool) -> impl Strategy<Value = Vec<(String, String)>> {
    let key = prop_oneof![
        proptest::sample::select(vec![
            "sslmode",
            "application_name",
            "options",
            "connect_timeout",
            "host",
            "user",
            "pass"
        ])
        .prop_map(str::to_owned),
        "[a-z_]{1,12}".prop_filter("not a password's name", |k| !k.contains("password")),
    ];
    let value = if at_signs {
        "[a-zA-Z0-9%._ /:@-]{0,12}"
    } else {
        "[a-zA-Z0-9%._ /:-]{0,12}"
    };
    proptest::collection::vec((key, value), 0..4)
}

/// `password` in any case, its first letter percent-encoded or not, or
/// libpq's `sslpassword`.
fn password_name() -> impl Strategy<Value = String> {
    (
        proptest::collection::vec(any::<bool>(), 8),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(upper, escape, ssl)| {
            let mut name: String = "password"
                .chars()
                .zip(upper)
                .map(|(c, u)| if u { c.to_ascii_uppercase() } else { c })
                .collect();
            if escape {
                name = format!("%{:02X}{}", name.as_bytes()[0], &name[1..]);
            }
            if ssl {
                name.insert_str(0, "ssl");
            }
            name
        })
}

/// Where the password goes.
#[derive(Clone, Debug)]
enum Place {
    Userinfo,
    Param { name: String, at: usize },
    Both { name: String, at: usize },
}

fn place() -> impl Strategy<Value = Place> {
    prop_oneof![
        Just(Place::Userinfo),
        (password_name(), 0..4usize).prop_map(|(name, at)| Place::Param { name, at }),
        (password_name(), 0..4usize).prop_map(|(name, at)| Place::Both { name, at }),
    ]
}

/// The URL with `secret` where `place` puts the password.
fn build(
    scheme: &str,
    user: &str,
    hosts: &str,
    path: &str,
    params: &[(String, String)],
    place: &Place,
    secret: &str,
) -> String {
    let mut params: Vec<(String, String)> = params.to_vec();
    let userinfo = match place {
        Place::Userinfo | Place::Both { .. } => format!("{user}:{secret}@"),
        Place::Param { .. } if user.is_empty() => String::new(),
        Place::Param { .. } => format!("{user}@"),
    };
    if let Place::Param { name, at } | Place::Both { name, at } = place {
        params.insert((*at).min(params.len()), (name.clone(), secret.to_owned()));
    }
    let query = if params.is_empty() {
        String::new()
    } else {
        let joined: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("?{}", joined.join("&"))
    };
    let path = if query.is_empty() || !path.is_empty() {
        path.to_owned()
    } else {
        "/".to_owned()
    };
    format!("{scheme}://{userinfo}{hosts}{path}{query}")
}

proptest! {
    /// Whichever way a URL carries a password, the redacted text never
    /// holds it: not as typed, not as the URL writes it. Checked only when
    /// the password is not also part of the rest of the URL (then the
    /// check would find that part, not a leak).
    #[test]
    fn a_password_never_survives_redaction(
        scheme in scheme(),
        user in "[a-z0-9_.-]{0,8}",
        hosts in hosts(true),
        path in path(),
        params in params(true),
        place in place(),
        pw in password(),
        enc in encoding(),
    ) {
        let in_query = !matches!(place, Place::Userinfo);
        let written = placed(&pw, enc, in_query);
        let url = build(scheme, &user, &hosts, &path, &params, &place, &written);
        let rest = build(scheme, &user, &hosts, &path, &params, &place, MASK);
        prop_assume!(!rest.contains(pw.as_str()) && !rest.contains(written.as_str()));
        let shown = redact_url(&url);
        prop_assert!(!shown.contains(pw.as_str()), "{url:?} shown as {shown:?}");
        prop_assert!(!shown.contains(written.as_str()), "{url:?} shown as {shown:?}");
    }

    /// A libpq key/value string's password, quoted or with `\` escapes.
    #[test]
    fn a_key_value_password_never_survives_redaction(
        host in "[a-z0-9.]{1,10}",
        pw in password(),
        quoted in any::<bool>(),
        name in "password|PASSWORD|Password|sslpassword",
        after in "( dbname=[a-z]{1,6})?( port=[0-9]{1,5})?",
    ) {
        let mut written = String::new();
        for c in pw.chars() {
            if c == '\\' || c == '\'' || (!quoted && c.is_whitespace()) {
                written.push('\\');
            }
            written.push(c);
        }
        let value = if quoted { format!("'{written}'") } else { written.clone() };
        let s = format!("host={host} {name}={value}{after}");
        let rest = format!("host={host} {name}={MASK}{after}");
        prop_assume!(!rest.contains(pw.as_str()) && !rest.contains(written.as_str()));
        let shown = redact_url(&s);
        prop_assert!(!shown.contains(pw.as_str()), "{s:?} shown as {shown:?}");
        prop_assert!(!shown.contains(written.as_str()), "{s:?} shown as {shown:?}");
    }

    /// A URL without a password (a user alone or none, parameters of other
    /// names, no `@` elsewhere) is shown as it is.
    #[test]
    fn a_url_without_a_password_is_unchanged(
        scheme in scheme(),
        user in proptest::option::of("[a-z0-9_.-]{1,8}"),
        hosts in hosts(false),
        path in path(),
        params in params(false),
    ) {
        let userinfo = user.map(|u| format!("{u}@")).unwrap_or_default();
        let query = if params.is_empty() {
            String::new()
        } else {
            let joined: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("?{}", joined.join("&"))
        };
        let url = format!("{scheme}://{userinfo}{hosts}{path}{query}");
        prop_assert_eq!(redact_url(&url), url);
    }

    /// A SQLite URL has no password and is never changed.
    #[test]
    fn a_sqlite_url_is_unchanged(path in "(//)?/?[a-zA-Z0-9_./@: -]{1,30}") {
        let url = format!("sqlite:{path}");
        prop_assert_eq!(redact_url(&url), url);
    }
}
