package docker

import (
	"debug/elf"
	"errors"
	"fmt"
)

// errDynamic is an init binary that a dynamic loader would start: LD_PRELOAD, which the program
// controls when it runs the init itself, would then load the program's code into it, and that
// code could read the execute-only init out of its own memory.
var errDynamic = errors.New("dynamically linked: the container init must be static (build the worker with CGO_ENABLED=0)")

// checkStatic returns an error wrapping errDynamic unless path is an ELF executable with no
// program interpreter and no needed shared library: nothing of it runs before its own code.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s: %w", path, errDynamic)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(libs) > 0 {
		return fmt.Errorf("%s needs %v: %w", path, libs, errDynamic)
	}
	return nil
}
