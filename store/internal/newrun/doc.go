// Package newrun checks and completes a run and its calls before a store
// implementation saves them, so that every implementation accepts and
// rejects the same input.
package newrun
