package archiver

// SetAfterStep makes a call f after each step of a pass, with the step's
// name: "selected", "intent", "put", "stored", "purged-one", "purged-all",
// "purged", "done".
func SetAfterStep(a *Archiver, f func(step string)) {
	a.afterStep = func(s step) { f(string(s)) }
}
