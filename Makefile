# magpie: libmagpie (runtime/), magpied (daemon/), their tests and benchmarks.
#
#   make [all]                      build libmagpie and the programs into build/release/
#   make test                       build and run every Criterion suite
#   make test SANITIZE=thread       the same under ThreadSanitizer      (build/tsan/)
#   make test SANITIZE=address,undefined  ... under ASan + UBSan        (build/asan/)
#   make run                        build and start the daemon on config/magpied.conf
#   make bench                      runtime benchmark against its Tokio twin (loadtest/)
#   make install PREFIX=/usr/local DESTDIR=...
#   make lint                       clang-format check and cppcheck
#
# Missing Debian packages are installed with apt-get when run as root; otherwise the
# exact command is printed.

SANITIZE ?=
PREFIX   ?= /usr/local
DESTDIR  ?=
CC       ?= cc

ifeq ($(SANITIZE),)
  VARIANT   := release
  OPT       := -O2
else ifeq ($(SANITIZE),thread)
  VARIANT   := tsan
  OPT       := -O1 -fsanitize=thread
  # Criterion cannot place its arena under TSan without this (see the file).
  TEST_EXTRA := tests/tsan_arena.c
else ifeq ($(SANITIZE),address,undefined)
  VARIANT   := asan
  OPT       := -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
else
  $(error SANITIZE must be empty, thread, or address,undefined)
endif

B := build/$(VARIANT)

WARN   := -Wall -Wextra -Wstrict-prototypes -Wshadow -Wno-unused-parameter
ifneq ($(filter true 1,$(CI) $(WERROR)),)
  WARN += -Werror
endif
CFLAGS_ALL := -std=c11 -D_GNU_SOURCE -g -pthread $(OPT) $(WARN) -MMD -MP $(CFLAGS)
LDFLAGS_ALL := -pthread $(OPT) $(LDFLAGS)

RT_INC   := -Iruntime/include -Iruntime/src
RT_SRCS  := $(sort $(wildcard runtime/src/*.c runtime/src/sync/*.c runtime/src/pool/*.c))
RT_OBJS  := $(RT_SRCS:%.c=$(B)/obj/%.o)
# The same runtime with a 4-slot ring, to widen interleavings in the stress tests.
RT_Q4_OBJS := $(RT_SRCS:%.c=$(B)/obj-q4/%.o)
LIB      := $(B)/libmagpie.a
LIB_Q4   := $(B)/libmagpie-q4.a

RT_TESTS := $(sort $(wildcard tests/runtime/test_*.c tests/runtime/*/test_*.c))
RT_TEST_BINS := $(patsubst tests/runtime/%.c,$(B)/tests/runtime/%,$(RT_TESTS))
# Suites that also run against the 4-slot ring.
Q4_TESTS := queue stress task worker
Q4_TEST_BINS := $(Q4_TESTS:%=$(B)/tests/runtime/test_%-q4)

DEMO := $(B)/magpie-demo

# magpied: every daemon/*.c but main.c goes into a library the daemon tests link too.
# llhttp is compiled from the C sources Debian ships in node-llhttp.
LLHTTP_DIR  := /usr/share/llhttp
LLHTTP_INC  := -I/usr/share/include/llhttp
LLHTTP_OBJS := $(B)/obj/llhttp/api.o $(B)/obj/llhttp/http.o $(B)/obj/llhttp/llhttp.o
D_SRCS   := $(sort $(filter-out daemon/main.c,$(wildcard daemon/*.c)))
D_OBJS   := $(D_SRCS:%.c=$(B)/obj/%.o)
D_LIB    := $(B)/libmagpied.a
D_INC    := $(RT_INC) -Idaemon $(LLHTTP_INC)
D_LIBS   := -luv -linih
MAGPIED  := $(B)/magpied
D_TESTS  := $(sort $(wildcard tests/daemon/test_*.c))
D_TEST_BINS := $(patsubst tests/daemon/%.c,$(B)/tests/daemon/%,$(D_TESTS))

DEB_PKGS := build-essential pkg-config libuv1-dev node-llhttp libcriterion-dev libinih-dev wrk curl

.PHONY: all test run bench clean install lint deps
# magpied joins the default build once daemon/main.c exists; the release build is also
# reachable as build/magpied.
ifneq ($(wildcard daemon/main.c),)
  PROGRAMS := $(MAGPIED)
  ifeq ($(VARIANT),release)
    PROGRAMS += build/magpied
  endif
endif
all: $(LIB) $(DEMO) $(PROGRAMS)

deps:
	@missing=""; for p in $(DEB_PKGS); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing || exit 1; \
	  else \
	    echo "missing Debian packages; run:  sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi

$(B)/obj/%.o: %.c | deps
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(RT_INC) -c $< -o $@

$(B)/obj-q4/%.o: %.c | deps
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(RT_INC) -DMP_QUEUE_CAPACITY=4 -c $< -o $@

$(B)/obj/llhttp/%.o: $(LLHTTP_DIR)/%.c | deps
	@mkdir -p $(@D)
	$(CC) -std=c11 -g $(OPT) -MMD -MP $(LLHTTP_INC) -c $< -o $@

$(B)/obj/daemon/%.o: daemon/%.c | deps
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(D_INC) -c $< -o $@

$(D_LIB): $(D_OBJS) $(LLHTTP_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(MAGPIED): $(B)/obj/daemon/main.o $(D_LIB) $(LIB)
	$(CC) $^ -o $@ $(LDFLAGS_ALL) $(D_LIBS)

build/magpied: build/release/magpied
	ln -sf release/magpied $@

$(B)/tests/daemon/%: tests/daemon/%.c $(D_LIB) $(LIB) | deps
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(D_INC) -Itests $< $(TEST_EXTRA) $(D_LIB) $(LIB) -o $@ $(LDFLAGS_ALL) $(D_LIBS) -lcriterion

$(LIB): $(RT_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(LIB_Q4): $(RT_Q4_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(B)/tests/runtime/%: tests/runtime/%.c $(LIB) | deps
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(RT_INC) -Itests $< $(TEST_EXTRA) $(LIB) -o $@ $(LDFLAGS_ALL) -luv -lcriterion

$(B)/tests/runtime/%-q4: tests/runtime/%.c $(LIB_Q4) | deps
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(RT_INC) -Itests -DMP_QUEUE_CAPACITY=4 $< $(TEST_EXTRA) $(LIB_Q4) -o $@ $(LDFLAGS_ALL) -luv -lcriterion

$(DEMO): runtime/examples/demo.c $(LIB)
	$(CC) $(CFLAGS_ALL) -Iruntime/include $< $(LIB) -o $@ $(LDFLAGS_ALL) -luv

test: $(RT_TEST_BINS) $(Q4_TEST_BINS) $(D_TEST_BINS) $(PROGRAMS)
	@tests/run-suites.sh $(VARIANT) $(RT_TEST_BINS) $(Q4_TEST_BINS) $(D_TEST_BINS)

run: all
	$(if $(PROGRAMS),$(MAGPIED) -c config/magpied.conf,$(DEMO))

bench:
	loadtest/runtime/compare.sh

install: $(LIB) $(PROGRAMS)
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	$(if $(PROGRAMS),install -D -m 755 $(B)/magpied $(DESTDIR)$(PREFIX)/sbin/magpied)
	$(if $(PROGRAMS),install -D -m 644 config/magpied.conf $(DESTDIR)/etc/magpied/magpied.conf)
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/libmagpie.a
	install -m 644 runtime/include/magpie.h $(DESTDIR)$(PREFIX)/include/magpie.h
	sed -e 's|@PREFIX@|$(PREFIX)|g' runtime/magpie.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/magpie.pc

LINT_SRCS := $(shell find runtime daemon tests loadtest -name '*.[ch]' 2>/dev/null)
lint:
	clang-format --dry-run --Werror $(LINT_SRCS)
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
	  --suppress=missingIncludeSystem --inline-suppr -D_GNU_SOURCE $(RT_INC) runtime/src

clean:
	rm -rf build

-include $(shell find build -name '*.d' 2>/dev/null)
