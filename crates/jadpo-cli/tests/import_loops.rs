//! No two files of a crate import each other, in a circle of two or more.
//!
//! Files in a circle cannot be read, tested or moved one at a time: each
//! needs the others first. We took such circles out of the crates; this test
//! keeps them out. Cargo already refuses a circle of crates, but not one of
//! files inside a crate.
//!
//! It reads the source as text, with std alone, so it builds in a moment. A
//! file imports the module it names through `crate::`, `super::` or `self::`,
//! in a `use` or written inline, and the path counts at the deepest module
//! that has a file. A bare `child::f` is not read: a file may lean on what it
//! declares. Names of other crates do not count. Comments and strings do not
//! count. Test modules inside a file do: they are part of the file, and a
//! file whose tests reach into a file that reaches back is in a circle too.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::Path;

const ADVICE: &str =
    "files that import each other: move what both need into a file of its own (ARCHITECTURE.md, rules of dependency)";

#[test]
fn no_two_files_of_a_crate_import_each_other() {
    let sources = workspace_sources();
    let graph = graph(&sources);
    println!("{} files, {} edges", graph.files.len(), graph.edges.len());
    // A walk that read nothing would find no circle either.
    assert!(
        sources.len() > 50 && graph.edges.len() > 50,
        "read too little: {} files",
        sources.len()
    );
    let found = circles(&graph);
    assert!(found.is_empty(), "{}", report(&graph, &found));
}

#[test]
fn the_check_finds_a_circle_and_only_a_circle() {
    let lib = ("crates/x/src/lib.rs", "mod a; mod b; mod c;");
    let circle = [
        lib,
        ("crates/x/src/a.rs", "use crate::b::X;\npub struct Y;"),
        ("crates/x/src/b.rs", "pub struct X;\nfn f() -> crate::a::Y { todo!() }"),
    ];
    let g = graph(&owned(&circle));
    let found = circles(&g);
    assert_eq!(names(&g, &found), [vec!["crates/x/src/a.rs", "crates/x/src/b.rs"]]);
    let message = report(&g, &found);
    assert!(message.contains(ADVICE), "{message}");
    assert!(
        message.contains("crates/x/src/a.rs -> crates/x/src/b.rs: X"),
        "{message}"
    );
    assert!(
        message.contains("crates/x/src/b.rs -> crates/x/src/a.rs: Y"),
        "{message}"
    );

    let line = [
        lib,
        ("crates/x/src/a.rs", "use crate::b::X;"),
        ("crates/x/src/b.rs", "use crate::c::{Z, W};\npub struct X;"),
        ("crates/x/src/c.rs", "pub struct Z;\npub struct W;"),
    ];
    let g = graph(&owned(&line));
    assert_eq!(g.edges.len(), 2);
    assert!(circles(&g).is_empty());
}

#[test]
fn a_circle_through_three_files_and_super() {
    let files = [
        ("crates/x/src/lib.rs", "mod m;"),
        ("crates/x/src/m/mod.rs", "mod p; mod q;\nuse self::p::P;\npub struct M;"),
        ("crates/x/src/m/p.rs", "use super::{\n    q::{Q, other::{R}},\n};"),
        ("crates/x/src/m/q.rs", "fn f() { let _ = super::M; }"),
    ];
    let g = graph(&owned(&files));
    let found = circles(&g);
    assert_eq!(
        names(&g, &found),
        [vec![
            "crates/x/src/m/mod.rs",
            "crates/x/src/m/p.rs",
            "crates/x/src/m/q.rs"
        ]]
    );
}

#[test]
fn comments_strings_other_crates_and_inner_tests_tie_nothing() {
    let files = [
        ("crates/x/src/lib.rs", "mod a; mod b;"),
        (
            "crates/x/src/a.rs",
            "use crate::b::X;\npub(crate) struct Y;\nmod inner { use super::Y; }",
        ),
        (
            "crates/x/src/b.rs",
            concat!(
                "// crate::a::Y\n/// [`crate::a::Y`]\n/* crate::a::Y /* nested */ crate::a::Y */\n",
                "const S: &str = \"crate::a::Y\";\nconst R: &str = r#\"crate::a::\"Y\"#;\n",
                "const C: char = '{'; fn f<'a>(s: &'a str) -> &'a str { s }\n",
                "pub(in crate::a) struct X;\nuse other_crate::a::Y;\n",
                "#[cfg(test)]\nmod tests { use super::X; }\n",
            ),
        ),
    ];
    let g = graph(&owned(&files));
    assert_eq!(g.edges.len(), 1, "{:?}", g.edges);
    assert!(circles(&g).is_empty());
}

#[test]
fn a_path_attribute_places_its_file_under_the_module_that_declares_it() {
    let files = [
        ("crates/x/src/lib.rs", "mod a; mod b;"),
        (
            "crates/x/src/a.rs",
            "use crate::b::B;\n#[cfg(test)]\n#[path = \"a_tests.rs\"]\nmod tests;",
        ),
        // `super` here is `a`, not the crate's root.
        ("crates/x/src/a_tests.rs", "use super::*;"),
        ("crates/x/src/b.rs", "pub struct B;"),
    ];
    let g = graph(&owned(&files));
    let edges: Vec<(&str, &str)> = g
        .edges
        .keys()
        .map(|&(from, to)| (g.files[from].as_str(), g.files[to].as_str()))
        .collect();
    assert_eq!(
        edges,
        [
            ("crates/x/src/a.rs", "crates/x/src/b.rs"),
            ("crates/x/src/a_tests.rs", "crates/x/src/a.rs"),
        ]
    );
}

fn owned(files: &[(&str, &str)]) -> Vec<(String, String)> {
    files.iter().map(|(p, t)| (p.to_string(), t.to_string())).collect()
}

fn names<'g>(g: &'g Graph, found: &[Vec<usize>]) -> Vec<Vec<&'g str>> {
    found
        .iter()
        .map(|c| c.iter().map(|&f| g.files[f].as_str()).collect())
        .collect()
}

/// Every `crates/*/src/**/*.rs`, as (path from the workspace root, text).
fn workspace_sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut out = Vec::new();
    let mut crates: Vec<_> = fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    crates.sort();
    for name in crates {
        let rel = format!("crates/{}/src", name.to_string_lossy());
        if root.join(&rel).is_dir() {
            walk(&root, &rel, &mut out);
        }
    }
    out
}

fn walk(root: &Path, rel: &str, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = fs::read_dir(root.join(rel)).unwrap().map(|e| e.unwrap()).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = format!("{rel}/{}", entry.file_name().to_string_lossy());
        if entry.file_type().unwrap().is_dir() {
            walk(root, &path, out);
        } else if path.ends_with(".rs") {
            out.push((path.clone(), fs::read_to_string(root.join(&path)).unwrap()));
        }
    }
}

/// Files, and for each import of one file by another the names it takes.
struct Graph {
    files: Vec<String>,
    edges: BTreeMap<(usize, usize), BTreeSet<String>>,
}

/// A file's crate (a library and each binary is one) and module.
type Module = (String, Vec<String>);

fn graph(sources: &[(String, String)]) -> Graph {
    let files: Vec<String> = sources.iter().map(|(p, _)| p.clone()).collect();
    let scans: Vec<Scan> = sources.iter().map(|(_, text)| scan(&tokens(text))).collect();
    let index: HashMap<&str, usize> = files.iter().enumerate().map(|(i, p)| (p.as_str(), i)).collect();
    let mut modules: Vec<Option<Module>> = files.iter().map(|p| module_of(p, &index)).collect();

    // `#[path = "..."] mod m;` makes its file the module `m` of the declaring
    // one, whatever the file's name. Repeated so a chain of them settles.
    for _ in 0..=files.len() {
        let mut changed = false;
        for (f, s) in scans.iter().enumerate() {
            let Some((unit, module)) = modules[f].clone() else {
                continue;
            };
            for (inline, target, name) in &s.path_mods {
                let mut dir: Vec<&str> = files[f].split('/').collect();
                let file_name = dir.pop().unwrap_or("");
                if !inline.is_empty() && !["mod.rs", "lib.rs", "main.rs"].contains(&file_name) {
                    dir.push(file_name.trim_end_matches(".rs"));
                }
                dir.extend(inline.iter().map(String::as_str));
                let Some(&g) = index.get(normalize(&dir, target).as_str()) else {
                    continue;
                };
                let placed = Some((
                    unit.clone(),
                    [module.as_slice(), inline.as_slice(), std::slice::from_ref(name)].concat(),
                ));
                if modules[g] != placed {
                    modules[g] = placed;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }

    let by_module: HashMap<&Module, usize> = modules
        .iter()
        .enumerate()
        .filter_map(|(i, m)| m.as_ref().map(|m| (m, i)))
        .collect();
    let mut edges: BTreeMap<(usize, usize), BTreeSet<String>> = BTreeMap::new();
    for (f, s) in scans.iter().enumerate() {
        let Some((unit, module)) = &modules[f] else { continue };
        for (inline, path) in &s.names {
            let full = resolve(&[module.as_slice(), inline.as_slice()].concat(), path);
            let found = (0..=full.len()).rev().find_map(|k| {
                let key = (unit.clone(), full[..k].to_vec());
                by_module.get(&key).map(|&g| (k, g))
            });
            let Some((k, g)) = found else { continue };
            if g == f {
                continue;
            }
            let name = full.get(k).or(full.last()).map_or("crate", String::as_str);
            edges.entry((f, g)).or_default().insert(name.to_string());
        }
    }
    Graph { files, edges }
}

/// `crates/c/src/a/b.rs` is module `a::b` of crate `crates/c`; `a/mod.rs` is
/// `a`; `lib.rs` is the root. `main.rs` beside a `lib.rs`, and each file of
/// `src/bin`, is a crate of its own.
fn module_of(path: &str, index: &HashMap<&str, usize>) -> Option<Module> {
    let (krate, rest) = path.split_once("/src/")?;
    let mut parts: Vec<&str> = rest.split('/').collect();
    let unit = if parts == ["main.rs"] && index.contains_key(format!("{krate}/src/lib.rs").as_str()) {
        format!("{krate} (main)")
    } else if parts[0] == "bin" && parts.len() > 1 {
        let unit = format!("{krate} (bin {})", parts[1].trim_end_matches(".rs"));
        parts = if parts.len() > 2 {
            parts[2..].to_vec()
        } else {
            vec!["main.rs"]
        };
        unit
    } else {
        krate.to_string()
    };
    let last = parts.pop()?;
    let mut module: Vec<String> = parts.iter().map(|p| p.to_string()).collect();
    if !(last == "mod.rs" || (module.is_empty() && (last == "lib.rs" || last == "main.rs"))) {
        module.push(last.trim_end_matches(".rs").to_string());
    }
    Some((unit, module))
}

fn normalize(dir: &[&str], target: &str) -> String {
    let mut out: Vec<&str> = dir.to_vec();
    for part in target.split('/') {
        match part {
            "." | "" => {}
            ".." => {
                out.pop();
            }
            p => out.push(p),
        }
    }
    out.join("/")
}

/// The module a path names, from the module it is written in.
fn resolve(base: &[String], path: &[String]) -> Vec<String> {
    let mut full = match path[0].as_str() {
        "crate" | "$crate" => Vec::new(),
        _ => base.to_vec(),
    };
    if path[0] == "super" {
        full.pop();
    }
    for segment in &path[1..] {
        match segment.as_str() {
            "super" => {
                full.pop();
            }
            "self" => {}
            s => full.push(s.to_string()),
        }
    }
    full
}

/// Why the test fails: each circle, and what each of its files takes from
/// the others.
fn report(g: &Graph, found: &[Vec<usize>]) -> String {
    let mut out = format!("{ADVICE}\n");
    for (n, circle) in found.iter().enumerate() {
        let files: Vec<&str> = circle.iter().map(|&f| g.files[f].as_str()).collect();
        out += &format!("circle {}: {}\n", n + 1, files.join(", "));
        for ((from, to), names) in &g.edges {
            if circle.contains(from) && circle.contains(to) {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                out += &format!("  {} -> {}: {}\n", g.files[*from], g.files[*to], names.join(", "));
            }
        }
    }
    out
}

/// The strongly connected components of more than one file (Tarjan), each
/// sorted, in the order of their first file.
fn circles(g: &Graph) -> Vec<Vec<usize>> {
    struct Tarjan<'a> {
        next: &'a [Vec<usize>],
        order: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        count: usize,
        found: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.order[v] = Some(self.count);
            self.low[v] = self.count;
            self.count += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for &w in &self.next[v] {
                match self.order[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(o) if self.on_stack[w] => self.low[v] = self.low[v].min(o),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.order[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let n = g.files.len();
    let mut next = vec![Vec::new(); n];
    for &(from, to) in g.edges.keys() {
        next[from].push(to);
    }
    let mut t = Tarjan {
        next: &next,
        order: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on_stack: vec![false; n],
        count: 0,
        found: Vec::new(),
    };
    for v in 0..n {
        if t.order[v].is_none() {
            t.visit(v);
        }
    }
    t.found.sort();
    t.found
}

#[derive(Debug, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    /// `::`
    Sep,
    Punct(char),
}

/// Rust source as tokens enough to find paths: comments dropped, strings and
/// char literals kept whole so a brace or a path inside them counts for
/// nothing.
fn tokens(text: &str) -> Vec<Tok> {
    let c: Vec<char> = text.chars().collect();
    let at = |i: usize| c.get(i).copied();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == Some('*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == Some('/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if ch == '"' {
            let start = i + 1;
            i = start;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            out.push(Tok::Str(c[start..i.min(c.len())].iter().collect()));
            i += 1;
        } else if ch == '\'' {
            if at(i + 1) == Some('\\') {
                i += 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == Some('\'') {
                i += 3;
            } else {
                // A lifetime or a label: its name lexes as an identifier.
                i += 1;
            }
        } else if let Some((text, end)) = raw_string(&c, i) {
            out.push(Tok::Str(text));
            i = end;
        } else if ch.is_alphanumeric() || ch == '_' || (ch == '$' && at(i + 1).is_some_and(char::is_alphabetic)) {
            let start = i;
            i += 1;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(c[start..i].iter().collect()));
        } else if ch == ':' && at(i + 1) == Some(':') {
            out.push(Tok::Sep);
            i += 2;
        } else {
            out.push(Tok::Punct(ch));
            i += 1;
        }
    }
    out
}

/// `r"..."`, `r#"..."#`, `br"..."`, `cr"..."` at `i`: its text and the index
/// past its end.
fn raw_string(c: &[char], i: usize) -> Option<(String, usize)> {
    let mut j = i;
    if matches!(c.get(j), Some('b' | 'c')) {
        j += 1;
    }
    if c.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = c[j..].iter().take_while(|&&h| h == '#').count();
    j += hashes;
    if c.get(j) != Some(&'"') {
        return None;
    }
    let start = j + 1;
    let mut k = start;
    while k < c.len() {
        if c[k] == '"' && c[k + 1..].iter().take(hashes).filter(|&&h| h == '#').count() == hashes {
            return Some((c[start..k].iter().collect(), k + 1 + hashes));
        }
        k += 1;
    }
    Some((c[start..].iter().collect(), c.len()))
}

/// What one file names: each path that starts at `crate`, `super` or `self`
/// (with the inline modules it is written in), and each `#[path] mod m;`.
#[derive(Default)]
struct Scan {
    names: Vec<(Vec<String>, Vec<String>)>,
    /// (inline modules around it, the path given, the module's name)
    path_mods: Vec<(Vec<String>, String, String)>,
}

fn is_anchor(word: &str) -> bool {
    matches!(word, "crate" | "$crate" | "super" | "self")
}

fn scan(toks: &[Tok]) -> Scan {
    let ident = |i: usize| match toks.get(i) {
        Some(Tok::Ident(s)) => Some(s.as_str()),
        _ => None,
    };
    let mut out = Scan::default();
    // Inline modules (`mod tests { ... }`) open here, with the brace depth
    // inside each: `super` in them is the file's own module.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < toks.len() {
        let here = |inline: &[(String, usize)]| -> Vec<String> { inline.iter().map(|(n, _)| n.clone()).collect() };
        match &toks[i] {
            Tok::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Tok::Punct('}') => {
                if inline.last().is_some_and(|&(_, d)| d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            Tok::Ident(k) if k == "mod" => match (ident(i + 1), toks.get(i + 2)) {
                (Some(name), Some(Tok::Punct('{'))) => {
                    depth += 1;
                    inline.push((name.to_string(), depth));
                    i += 3;
                }
                _ => i += 1,
            },
            Tok::Ident(k) if k == "use" => {
                let mut paths = Vec::new();
                i = use_tree(toks, i + 1, &[], &mut paths);
                for path in paths.into_iter().filter(|p| is_anchor(&p[0])) {
                    out.names.push((here(&inline), path));
                }
            }
            Tok::Punct('#') if toks.get(i + 1) == Some(&Tok::Punct('[')) && ident(i + 2) == Some("path") => {
                if let (Some(Tok::Punct('=')), Some(Tok::Str(target))) = (toks.get(i + 3), toks.get(i + 4)) {
                    // The `mod` this attribute stands on, past other attributes.
                    let declared = (i + 5..toks.len().min(i + 40))
                        .take_while(|&j| !matches!(toks[j], Tok::Punct(';' | '{' | '}')))
                        .find(|&j| ident(j) == Some("mod"))
                        .and_then(|j| ident(j + 1).filter(|_| toks.get(j + 2) == Some(&Tok::Punct(';'))));
                    if let Some(name) = declared {
                        out.path_mods.push((here(&inline), target.clone(), name.to_string()));
                    }
                }
                i += 1;
            }
            Tok::Ident(k) if is_anchor(k) && toks.get(i + 1) == Some(&Tok::Sep) => {
                // `pub(in crate::a)` says who may see an item, not what it uses.
                let visibility = i >= 2 && ident(i - 1) == Some("in") && toks[i - 2] == Tok::Punct('(');
                let mut path = vec![k.clone()];
                let mut j = i + 1;
                while toks.get(j) == Some(&Tok::Sep) {
                    let Some(segment) = ident(j + 1) else { break };
                    path.push(segment.to_string());
                    j += 2;
                }
                if !visibility {
                    out.names.push((here(&inline), path));
                }
                i = j;
            }
            _ => i += 1,
        }
    }
    out
}

/// One use tree from `i` (`a::b`, `a::{b, c::{d, e}}`, `a::*`, `a as b`),
/// each full path it names pushed to `out`; the index past it.
fn use_tree(toks: &[Tok], mut i: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    if toks.get(i) == Some(&Tok::Sep) {
        i += 1;
    }
    loop {
        match toks.get(i) {
            Some(Tok::Ident(segment)) => {
                path.push(segment.clone());
                i += 1;
                if toks.get(i) == Some(&Tok::Sep) {
                    i += 1;
                    continue;
                }
                if toks.get(i) == Some(&Tok::Ident("as".to_string())) {
                    i += 2;
                }
                out.push(path);
                return i;
            }
            Some(Tok::Punct('*')) => {
                path.push("*".to_string());
                out.push(path);
                return i + 1;
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                loop {
                    match toks.get(i) {
                        None => return i,
                        Some(Tok::Punct('}')) => return i + 1,
                        Some(Tok::Punct(',')) => i += 1,
                        Some(_) => {
                            let j = use_tree(toks, i, &path, out);
                            i = if j == i { i + 1 } else { j };
                        }
                    }
                }
            }
            _ => {
                if !path.is_empty() && path.len() > prefix.len() {
                    out.push(path);
                }
                return i;
            }
        }
    }
}
