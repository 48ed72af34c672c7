//! The `jadpo` crate's public surface, written out and kept as a snapshot
//! (`tests/snapshots/public_api__jadpo.snap`): a change to what users can
//! name or call is a visible diff in review, accepted with `cargo insta
//! accept` (or by `INSTA_UPDATE=always`), never a side effect.
//!
//! Read from the crate's own source: every `pub` item of each module
//! (not `pub(crate)`, not `#[cfg(test)]` or `#[doc(hidden)]`), every `pub`
//! method of its `impl` blocks with its signature, every field of a `pub`
//! struct or variant of a `pub` enum, and the `pub use` lines (the crates
//! they re-export whole are part of the surface until they are exported
//! by name). A `pub` item of a private module counts too: the workspace's
//! `unreachable_pub` lint keeps those reachable, so each is in the
//! surface.

use quote::ToTokens;
use std::fmt::Write as _;
use syn::{Attribute, ImplItem, Item, TraitItem, Visibility};

#[test]
fn the_public_api_is_the_snapshot() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files: Vec<_> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    let parsed: Vec<(String, syn::File)> = files
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path.file_name().unwrap().to_string_lossy().into_owned(), file)
        })
        .collect();
    // The crate's public types and traits: only their impls are its surface.
    let types: Vec<String> = parsed
        .iter()
        .flat_map(|(_, f)| &f.items)
        .filter_map(|item| match item {
            Item::Struct(s) if public(&s.vis) => Some(s.ident.to_string()),
            Item::Enum(e) if public(&e.vis) => Some(e.ident.to_string()),
            Item::Trait(t) if public(&t.vis) => Some(t.ident.to_string()),
            _ => None,
        })
        .collect();
    let mut out = String::new();
    for (name, file) in &parsed {
        let mut lines = Vec::new();
        for item in &file.items {
            describe(item, &types, &mut lines);
        }
        if !lines.is_empty() {
            writeln!(out, "# {name}").unwrap();
            for line in lines {
                writeln!(out, "{line}").unwrap();
            }
        }
    }
    insta::assert_snapshot!("jadpo", out);
}

fn public(vis: &Visibility) -> bool {
    matches!(vis, Visibility::Public(_))
}

/// `#[cfg(test)]` or `#[doc(hidden)]`: not part of what users rely on.
fn left_out(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        let text = a.to_token_stream().to_string();
        text.contains("cfg (test)") || text.contains("doc (hidden)")
    })
}

/// Tokens as one line, in the compact form `quote` prints them.
fn tokens(t: &impl ToTokens) -> String {
    t.to_token_stream().to_string()
}

fn describe(item: &Item, types: &[String], lines: &mut Vec<String>) {
    match item {
        Item::Use(u) if public(&u.vis) && !left_out(&u.attrs) => lines.push(format!("use {}", tokens(&u.tree))),
        // A module written inline (`pub mod sqlite { pub use ... }`): its
        // items, under its name.
        Item::Mod(m) if public(&m.vis) && !left_out(&m.attrs) => {
            if let Some((_, items)) = &m.content {
                lines.push(format!("mod {}", m.ident));
                let mut inner = Vec::new();
                for item in items {
                    describe(item, types, &mut inner);
                }
                lines.extend(inner.into_iter().map(|l| format!("    {l}")));
            }
        }
        Item::Fn(f) if public(&f.vis) && !left_out(&f.attrs) => lines.push(tokens(&f.sig)),
        Item::Const(c) if public(&c.vis) && !left_out(&c.attrs) => {
            lines.push(format!("const {}: {}", c.ident, tokens(&c.ty)))
        }
        Item::Type(t) if public(&t.vis) && !left_out(&t.attrs) => {
            lines.push(format!("type {}{} = {}", t.ident, tokens(&t.generics), tokens(&t.ty)))
        }
        Item::Struct(s) if public(&s.vis) && !left_out(&s.attrs) => {
            lines.push(format!("struct {}{}", s.ident, tokens(&s.generics)));
            for f in s.fields.iter().filter(|f| public(&f.vis)) {
                let name = f.ident.as_ref().map_or(String::new(), |i| format!("{i}: "));
                lines.push(format!("    {name}{}", tokens(&f.ty)));
            }
        }
        Item::Enum(e) if public(&e.vis) && !left_out(&e.attrs) => {
            let exhaustive = if e.attrs.iter().any(|a| tokens(a).contains("non_exhaustive")) {
                " (non_exhaustive)"
            } else {
                ""
            };
            lines.push(format!("enum {}{}{exhaustive}", e.ident, tokens(&e.generics)));
            for v in &e.variants {
                lines.push(format!("    {}{}", v.ident, fields(&v.fields)));
            }
        }
        Item::Trait(t) if public(&t.vis) && !left_out(&t.attrs) => {
            lines.push(format!(
                "trait {}{}: {}",
                t.ident,
                tokens(&t.generics),
                tokens(&t.supertraits)
            ));
            for i in &t.items {
                match i {
                    TraitItem::Fn(f) if !left_out(&f.attrs) => lines.push(format!("    {}", tokens(&f.sig))),
                    TraitItem::Const(c) if !left_out(&c.attrs) => {
                        lines.push(format!("    const {}: {}", c.ident, tokens(&c.ty)))
                    }
                    TraitItem::Type(ty) if !left_out(&ty.attrs) => {
                        lines.push(format!("    type {}{}", ty.ident, tokens(&ty.generics)))
                    }
                    _ => {}
                }
            }
        }
        // A public trait's impl is public whatever the type: which drivers'
        // transactions `EmitIn` takes is API too.
        Item::Impl(i) if !left_out(&i.attrs) && (of_public_type(&i.self_ty, types) || of_public_trait(i, types)) => {
            let of = match &i.trait_ {
                Some((_, path, _)) => format!("{} for ", tokens(path)),
                None => String::new(),
            };
            let head = format!("impl{} {of}{}", tokens(&i.generics), tokens(&i.self_ty));
            if i.trait_.is_some() {
                // A trait's impl is public with its type: its methods are
                // the trait's.
                lines.push(head);
                return;
            }
            let methods: Vec<String> = i
                .items
                .iter()
                .filter_map(|m| match m {
                    ImplItem::Fn(f) if public(&f.vis) && !left_out(&f.attrs) => Some(format!("    {}", tokens(&f.sig))),
                    _ => None,
                })
                .collect();
            if !methods.is_empty() {
                lines.push(head);
                lines.extend(methods);
            }
        }
        _ => {}
    }
}

/// Whether `i` implements one of the crate's public traits.
fn of_public_trait(i: &syn::ItemImpl, types: &[String]) -> bool {
    i.trait_
        .as_ref()
        .and_then(|(_, path, _)| path.segments.last())
        .is_some_and(|s| types.iter().any(|t| s.ident == t))
}

/// Whether `ty` is one of the crate's public types (by its last name).
fn of_public_type(ty: &syn::Type, types: &[String]) -> bool {
    match ty {
        syn::Type::Path(p) => p
            .path
            .segments
            .last()
            .is_some_and(|s| types.iter().any(|t| s.ident == t)),
        _ => false,
    }
}

/// A variant's fields without their attributes (doc comments): `(T, U)` or
/// `{ a: T, b: U }`.
fn fields(f: &syn::Fields) -> String {
    let each = |named: bool| -> Vec<String> {
        f.iter()
            .map(|f| match (&f.ident, named) {
                (Some(name), true) => format!("{name}: {}", tokens(&f.ty)),
                _ => tokens(&f.ty),
            })
            .collect()
    };
    match f {
        syn::Fields::Named(_) => format!(" {{ {} }}", each(true).join(", ")),
        syn::Fields::Unnamed(_) => format!("({})", each(false).join(", ")),
        syn::Fields::Unit => String::new(),
    }
}
