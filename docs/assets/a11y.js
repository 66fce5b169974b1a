// What axe-core asks of the theme's markup (nightly_assets_tests/test_docs_site.py): the search
// dialog has a name, and a wide table's scrolling box can be reached and scrolled with the keyboard.
// Run once the theme has mounted its components (its document$), which is when it wraps the tables.
function accessible() {
  document.querySelectorAll(".md-search[role=dialog]").forEach((dialog) => dialog.setAttribute("aria-label", "Search"));
  document.querySelectorAll(".md-typeset__scrollwrap").forEach((box) => {
    box.tabIndex = 0;
    box.setAttribute("role", "region");
    box.setAttribute("aria-label", "table");
  });
}
accessible();
if (typeof document$ !== "undefined") document$.subscribe(accessible);
