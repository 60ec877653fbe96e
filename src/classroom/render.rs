//! The page: one self-contained HTML document compiled into the binary — inline style and
//! script, no font, image or script fetched from anywhere, so it works offline. It is drawn
//! entirely from the session's event stream. The only thing put into it when it is served is the
//! nonce that lets its one script run under the page's Content-Security-Policy: it carries no
//! secret. The instructor's copy gets the control token from its own URL's fragment (`#control=`),
//! which the browser never sends, and keeps it in the tab's `sessionStorage`; without it the
//! page is the room's view.

/// The document, with `{{NONCE}}` to fill in.
const PAGE: &str = include_str!("page.html");

/// The page, its script's nonce `nonce` (lower-case hex).
pub(crate) fn page(nonce: &str) -> String {
    PAGE.replace("{{NONCE}}", nonce)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Self-contained: nothing is fetched from another place, and the placeholder is filled.
    #[test]
    fn the_page_fetches_nothing_and_carries_its_nonce() {
        let page = page(&"b".repeat(32));
        assert!(!page.contains("{{"), "a placeholder is left");
        // The SVG namespace is a name, not an address the browser fetches.
        let page = page.replace("\"http://www.w3.org/2000/svg\"", "SVG");
        assert!(page.contains(&format!("nonce=\"{}\"", "b".repeat(32))));
        for fetch in [
            "http://", "https://", "//cdn", "@import", "url(", "<link", "src=",
        ] {
            assert!(!page.contains(fetch), "the page fetches {fetch:?}");
        }
        assert_eq!(page.matches("<script").count(), 1);
    }
}
