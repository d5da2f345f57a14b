// Package browsertest drives the console in a real Chromium (chromedp), in a module of its own so
// that the browser's client never enters the library's module graph. It has tests only.
package browsertest
