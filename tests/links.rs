//! Every relative link and `#anchor` in README.md, docs/ and load-tests/README.md leads somewhere:
//! the file exists, and the anchor is a heading of the linked file (GitHub's slug: lowercase,
//! punctuation dropped, spaces to `-`, a repeated heading gets `-1`, `-2`, …). Links to the web
//! are not followed. Markdown is parsed with pulldown-cmark, so links in code are not links.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use pulldown_cmark::{Event, HeadingLevel, Parser, Tag, TagEnd};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The Markdown files whose links are checked.
fn documents() -> Vec<PathBuf> {
    let mut files = vec![Path::new(ROOT).join("README.md"), Path::new(ROOT).join("load-tests/README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// GitHub's anchor of a heading's text.
fn slug(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A Markdown file's links (with their line) and its headings' anchors.
struct Parsed {
    links: Vec<(usize, String)>,
    anchors: BTreeSet<String>,
}

fn parse(text: &str) -> Parsed {
    let line_of = |offset: usize| text[..offset].lines().count().max(1);
    let (mut links, mut anchors, mut seen) = (vec![], BTreeSet::new(), BTreeMap::<String, usize>::new());
    let mut heading: Option<String> = None;
    for (event, range) in Parser::new(text).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { level, .. }) if level <= HeadingLevel::H6 => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) if heading.is_some() => heading.as_mut().unwrap().push_str(&t),
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                let n = seen.entry(base.clone()).or_default();
                anchors.insert(if *n == 0 { base.clone() } else { format!("{base}-{n}") });
                *n += 1;
            }
            Event::Start(Tag::Link { dest_url, .. }) | Event::Start(Tag::Image { dest_url, .. }) => {
                links.push((line_of(range.start), dest_url.to_string()))
            }
            _ => {}
        }
    }
    Parsed { links, anchors }
}

#[test]
fn the_slug_is_githubs() {
    assert_eq!(
        slug("The kill switch, stock on the fly and the audit trail"),
        "the-kill-switch-stock-on-the-fly-and-the-audit-trail"
    );
    assert_eq!(slug("k6: a queued sale (`cargo xtask load k6-queue`)"), "k6-a-queued-sale-cargo-xtask-load-k6-queue");
    let parsed = parse("# A\n## A\ntext [x](#a-1) `[y](nowhere.md)`\n```\n[z](gone.md)\n```\n");
    assert_eq!(parsed.anchors, BTreeSet::from(["a".to_owned(), "a-1".to_owned()]));
    assert_eq!(parsed.links, vec![(3, "#a-1".to_owned())], "links in code are not links");
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_leads_somewhere() {
    let parsed: BTreeMap<PathBuf, Parsed> = documents()
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let parsed = parse(&text);
            (path.canonicalize().unwrap(), parsed)
        })
        .collect();
    let mut broken = vec![];
    let mut checked = 0;
    for (path, document) in &parsed {
        for (line, link) in &document.links {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = link.split_once('#').map_or((link.as_str(), None), |(f, a)| (f, Some(a)));
            let target = if file.is_empty() { path.clone() } else { path.parent().unwrap().join(file) };
            let shown = path.strip_prefix(ROOT).unwrap().display();
            if !target.exists() {
                broken.push(format!("{shown}:{line}: {link}: no file {}", target.display()));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            let target = target.canonicalize().unwrap();
            let anchors = match parsed.get(&target) {
                Some(linked) => linked.anchors.clone(),
                None if target.extension().is_some_and(|e| e == "md") => {
                    parse(&std::fs::read_to_string(&target).unwrap()).anchors
                }
                None => continue, // an anchor into a source file (a line, #L10) is not checked
            };
            if !anchors.contains(anchor) {
                broken.push(format!("{shown}:{line}: {link}: no heading #{anchor}"));
            }
        }
    }
    assert!(checked > 50, "the docs' relative links were found: {checked}");
    assert!(broken.is_empty(), "{} broken links:\n{}", broken.len(), broken.join("\n"));
}
