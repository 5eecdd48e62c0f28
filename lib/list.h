/*
 * Intrusive doubly-linked list with a sentinel head, after h2o's h2o_linklist_t and the kernel's
 * list_head: embed a struct list_node in the element, keep one as the list's head, and every
 * insertion and removal is O(1) with no allocation and no special case for the ends.
 *
 * A node that is in no list has NULL links (list_node_init, or zeroed memory), so list_linked
 * tells whether it is queued. Not thread-safe: the owner of the list locks.
 */
#ifndef TANDEM_LIB_LIST_H
#define TANDEM_LIB_LIST_H

#include <stdbool.h>
#include <stddef.h>

#include "lib/common.h"

struct list_node {
    struct list_node *prev;
    struct list_node *next;
};

/* An empty list: the head points at itself. */
static inline void list_init(struct list_node *head)
{
    head->prev = head->next = head;
}

/* A node in no list. */
static inline void list_node_init(struct list_node *n)
{
    n->prev = n->next = NULL;
}

static inline bool list_empty(const struct list_node *head)
{
    return head->next == head;
}

/* Whether the node is in a list. */
static inline bool list_linked(const struct list_node *n)
{
    return n->next != NULL;
}

/* Inserts n (in no list) just before pos; pos may be a head (then n becomes the last). */
static inline void list_insert_before(struct list_node *pos, struct list_node *n)
{
    TANDEM_ASSERT(!list_linked(n));
    n->prev = pos->prev;
    n->next = pos;
    pos->prev->next = n;
    pos->prev = n;
}

/* Inserts n (in no list) just after pos; pos may be a head (then n becomes the first). */
static inline void list_insert_after(struct list_node *pos, struct list_node *n)
{
    list_insert_before(pos->next, n);
}

static inline void list_push_back(struct list_node *head, struct list_node *n)
{
    list_insert_before(head, n);
}

static inline void list_push_front(struct list_node *head, struct list_node *n)
{
    list_insert_after(head, n);
}

/* Removes n from its list; a node in no list is left as it is. */
static inline void list_unlink(struct list_node *n)
{
    if (!list_linked(n)) {
        return;
    }
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = NULL;
}

/* The first/last node, NULL when the list is empty. */
static inline struct list_node *list_first(const struct list_node *head)
{
    return list_empty(head) ? NULL : head->next;
}

static inline struct list_node *list_last(const struct list_node *head)
{
    return list_empty(head) ? NULL : head->prev;
}

/* The element that embeds node as member. */
#define list_entry(node, type, member) ((type *)(void *)((char *)(node)-offsetof(type, member)))

/* Iterates with n over the nodes of head; n may be unlinked (and freed) inside the loop. */
#define list_for_each_safe(head, n, tmp)                                                           \
    for ((n) = (head)->next, (tmp) = (n)->next; (n) != (head); (n) = (tmp), (tmp) = (n)->next)

#endif /* TANDEM_LIB_LIST_H */
